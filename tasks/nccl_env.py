"""One NCCL profile everywhere a process can start from:  pyinfra inventory/prod.py tasks/nccl_env.py

sglang_pve/deploys/nccl_env.py says where."""

from sglang_pve.deploys.nccl_env import nccl_env

nccl_env()
