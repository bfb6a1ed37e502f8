"""One systemd unit per server configuration; exactly the active one runs."""

from sglang_pve.context import deployment, venv
from sglang_pve.operations import systemd
from sglang_pve.provision import is_node
from sglang_pve.render import server_files

if not is_node():  # a container's task; Proxmox nodes get tasks/pve_host.py and tasks/containers.py
    config = deployment()
    systemd.server_units(
        name=f"Server units ({len(config.servers)}), active: {config.data.active_server or 'none'}",
        files={name: server_files(config, server, venv()) for name, server in config.servers.items()},
        active=config.data.active_server,
    )
