"""Proxmox node preparation (group pve_nodes): every NVIDIA device node exists before guests start.

The NVIDIA modules load at boot; a oneshot unit ordered before pve-guests.service runs
nvidia-modprobe for /dev/nvidiaN, nvidiactl and the lazily created nvidia-uvm pair (a container
with devN entries does not start when one is missing, provision/node_prep.py says which commands
and why). The deploy starts that unit too, not only at boot, and restarts it when its file
changed or a node is missing or wrong, so the nodes exist before provision_containers (after this
in deploys/full.py) creates or starts a container; device_nodes.present refuses one still wrong.
nvidia-persistenced keeps the GPUs initialised where its unit is installed; a driver from NVIDIA's
.run installer has none, and then it is skipped with a warning naming it. One fact reads the
node's GPUs, majors, nodes, driver version and that unit.
"""

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import systemd

from sglang_pve.deploy.operations import files
from sglang_pve.provision import device_nodes
from sglang_pve.provision.node_prep import DEVICE_NODES_UNIT, PERSISTENCED_UNIT, node_prep_files, persistenced_warning
from sglang_pve.provision.roles import is_node, node_gpus


@deploy("Node preparation")
def prepare_node() -> None:
    """A node's task; container hosts are skipped."""
    if not is_node():
        return
    gpus = node_gpus()
    prep = files.file_set(
        name="NVIDIA modules at boot, device-node unit before pve-guests", files=node_prep_files(gpus)
    )
    if gpus.persistenced == "loaded":
        systemd.service(
            name=f"{PERSISTENCED_UNIT} enabled and running", service=PERSISTENCED_UNIT, running=True, enabled=True
        )
    else:
        logger.warning(persistenced_warning(host.name, gpus.persistenced))
    wrong = device_nodes.problems(gpus)
    systemd.service(
        name=f"{DEVICE_NODES_UNIT} enabled and run"
        + (f" again ({', '.join(p.key for p in wrong)} not as the driver numbers them)" if wrong else ""),
        service=DEVICE_NODES_UNIT,
        running=True,
        enabled=True,
        restarted=prep.will_change or bool(wrong),
        daemon_reload=prep.will_change,
    )
