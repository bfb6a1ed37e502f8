"""The local lab (python -m lab up): real LXC containers with systemd and sshd, reached over SSH.

    pyinfra inventory/lab.py deploy.py
"""

from lab.layout import inventory_hosts

# The file name makes these hosts the group "lab": group_data/lab.py holds what differs from production.
sglang_hosts = inventory_hosts()
