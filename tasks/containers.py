"""The LXC containers of this Proxmox node (group pve_nodes), through its API:

    pyinfra inventory/prod.py tasks/containers.py --dry --diff    # the config diff, no API write

Every inventory host whose ``container.node`` names this node: created when absent (GPUs passed
through as devN, or raw lines; model storage as raw bind-mount lines, so snapshots stay possible),
otherwise changed key by key after a snapshot, started, its SSH host key pinned.
"""

from sglang_pve.provision.container import container
from sglang_pve.provision.roles import containers, is_node, node_gpus, this_node

if is_node():
    node = this_node()
    gpus = node_gpus()
    for name, spec, guest in containers():
        container(name=f"Container {spec.vmid} ({name})", spec=spec, node=node, gpus=gpus, guest=guest)
