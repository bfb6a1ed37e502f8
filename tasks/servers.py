"""One systemd unit per server configuration, the active one switched to atomically:

    pyinfra inventory/prod.py tasks/servers.py

sglang_pve/deploys/servers.py says how."""

from sglang_pve.deploys.servers import servers

servers()
