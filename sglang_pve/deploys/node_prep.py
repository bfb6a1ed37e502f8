"""Proxmox node preparation (group pve_nodes): every NVIDIA device node exists before guests start.

nvidia-persistenced keeps the GPUs initialised; the NVIDIA modules load at boot; a oneshot unit
ordered before pve-guests.service creates /dev/nvidiaN and the lazily created nvidia-uvm nodes
(a container with devN entries does not start when one is missing). One fact reads the node's
GPUs, majors and driver version (the version preflight compares the containers' against).
"""

from pyinfra.api import deploy
from pyinfra.operations import systemd

from sglang_pve.deploy.operations import files
from sglang_pve.provision.node_prep import DEVICE_NODES_UNIT, node_prep_files
from sglang_pve.provision.roles import is_node, node_gpus


@deploy("Node preparation")
def prepare_node() -> None:
    """A node's task; container hosts are skipped."""
    if not is_node():
        return
    prep = files.file_set(
        name="NVIDIA modules at boot, device-node unit before pve-guests", files=node_prep_files(node_gpus())
    )
    systemd.service(
        name="nvidia-persistenced enabled and running",
        service="nvidia-persistenced.service",
        running=True,
        enabled=True,
    )
    systemd.service(
        name=f"{DEVICE_NODES_UNIT} enabled (runs at boot)",
        service=DEVICE_NODES_UNIT,
        running=None,
        enabled=True,
        daemon_reload=prep.will_change,
    )
