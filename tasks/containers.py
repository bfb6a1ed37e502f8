"""The LXC containers of this Proxmox node (group pve_nodes), through its API:

    pyinfra inventory/prod.py tasks/containers.py --dry --diff    # the config diff, no API write

sglang_pve/deploys/containers.py says what it does."""

from sglang_pve.deploys.containers import provision_containers

provision_containers()
