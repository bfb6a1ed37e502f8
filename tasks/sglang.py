"""The SGLang build in its own virtualenv:  pyinfra inventory/prod.py tasks/sglang.py

sglang_pve/deploys/sglang.py says how."""

from sglang_pve.deploys.sglang import sglang_venv

sglang_venv()
