"""Example production inventory: one SGLang LXC container per Proxmox node, reached over SSH
through the node as a jump host. Copy it and put in your own addresses.

    pyinfra inventory/prod.py deploy.py --dry --diff     # review
    pyinfra inventory/prod.py deploy.py                  # apply
    pyinfra inventory/prod.py deploy.py --limit pve1-sglang

Secrets never live here: SSH keys come from files you point at, anything else from the environment.
The jump host is configured in an ssh_config file (pyinfra honours ProxyJump there).
"""

import os

from sglang_pve.nccl.measured import with_measured

_ssh = {
    "ssh_user": "root",
    "ssh_key": os.environ.get("SGLANG_PVE_SSH_KEY", "~/.ssh/id_ed25519"),
    "ssh_config_file": os.environ.get("SGLANG_PVE_SSH_CONFIG", "inventory/ssh_config.example"),
}

# A profile measured by tasks/nccl_probe.py --data write=1 (group_data/nccl_measured.yml) becomes
# that host's nccl_profile; `--data nccl_profile=...` still wins.
sglang_hosts = with_measured([
    # 192.0.2.0/24 is a documentation range: replace with your container's address.
    ("pve1-sglang", {**_ssh, "ssh_hostname": "192.0.2.101"}),
])
