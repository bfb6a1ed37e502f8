"""Preflight alone:  pyinfra inventory/lab.py tasks/preflight.py

SGLang's own parser judges every server configuration (in the whole deploy: only those that would
change); a problem stops the run before any operation. sglang_pve/deploys/preflight.py says what it reads."""

from sglang_pve.deploys.preflight import preflight

preflight(judge_all=True)
