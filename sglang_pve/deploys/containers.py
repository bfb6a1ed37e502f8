"""The LXC containers of this Proxmox node (group pve_nodes), through its API.

Every inventory host whose ``container.node`` names this node: created when absent (GPUs passed
through as devN, or raw lines; model storage as raw bind-mount lines, so snapshots stay possible),
otherwise changed key by key after a snapshot, started, its SSH host key pinned. ``--dry --diff``
shows the config diff and writes nothing through the API. First, the node's NVIDIA device nodes
are checked (device_nodes.present): a missing or wrong one refuses every container write.
"""

from pyinfra.api import deploy

from sglang_pve.provision import device_nodes
from sglang_pve.provision.container import container
from sglang_pve.provision.roles import containers, is_node, node_gpus, this_node


@deploy("Containers")
def provision_containers() -> None:
    """A node's task; container hosts are skipped."""
    if not is_node():
        return
    node = this_node()
    gpus = node_gpus()
    found = containers()
    if found:
        device_nodes.present(name="NVIDIA device nodes as the driver numbers them")
    for name, spec, guest in found:
        container(name=f"Container {spec.vmid} ({name})", spec=spec, node=node, gpus=gpus, guest=guest)
