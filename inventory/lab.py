"""The local lab (python -m lab up): real LXC containers with systemd and sshd, reached over SSH.

    pyinfra inventory/lab.py deploy.py
"""

from lab.layout import inventory_hosts
from sglang_pve.nccl.measured import with_measured

# The file name makes these hosts the group "lab": group_data/lab.py holds what differs from production.
# A profile measured by tasks/nccl_probe.py (group_data/nccl_measured.yml) is host data.
sglang_hosts = with_measured(inventory_hosts())
