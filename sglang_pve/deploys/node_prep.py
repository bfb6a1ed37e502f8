"""Proxmox node preparation (group pve_nodes): every NVIDIA device node exists before guests start.

The NVIDIA modules load at boot; a oneshot unit ordered before pve-guests.service runs
nvidia-modprobe for /dev/nvidiaN, nvidiactl and the lazily created nvidia-uvm pair (a container
with devN entries does not start when one is missing, provision/node_prep.py says which commands
and why). The deploy starts that unit too, not only at boot, and restarts it when its file
changed or a node is missing or wrong, so the nodes exist before provision_containers (after this
in deploys/full.py) creates or starts a container; device_nodes.present refuses one still wrong.
nvidia-persistenced keeps the GPUs initialised where its unit is installed; a driver from NVIDIA's
.run installer has none, and then it is skipped with a warning naming it. The node's one read
of the run (provision/node_facts.py) gives its GPUs, majors, nodes, driver version, that unit's
LoadState and the files' digests; then the files' own check and one for both units (units.running):
three commands on a node where nothing changes.
"""

from pyinfra import host, logger
from pyinfra.api import deploy

from sglang_pve.deploy.operations import files, units
from sglang_pve.provision import device_nodes
from sglang_pve.provision.node_prep import DEVICE_NODES_UNIT, PERSISTENCED_UNIT, node_prep_files, persistenced_warning
from sglang_pve.provision.roles import is_node, node_gpus, node_read


@deploy("Node preparation")
def prepare_node() -> None:
    """A node's task; container hosts are skipped."""
    if not is_node():
        return
    gpus = node_gpus()
    prep = node_prep_files(gpus)
    files.file_set(name="NVIDIA modules at boot, device-node unit before pve-guests", files=prep)
    # whether the files change, from the node's one read (node_facts.py), as pyinfra's will_change
    # would say when prepared, without running file_set's check a second time
    changes = bool(files.changed_files(prep, node_read().files))
    wanted = [DEVICE_NODES_UNIT]
    if gpus.persistenced == "loaded":
        wanted.insert(0, PERSISTENCED_UNIT)
    else:
        logger.warning(persistenced_warning(host.name, gpus.persistenced))
    wrong = device_nodes.problems(gpus)
    why = ([f"{', '.join(p.key for p in wrong)} not as the driver numbers them"] if wrong else []) + (
        ["its files changed"] if changes else []
    )
    units.running(
        name=f"{' and '.join(wanted)} enabled and running"
        + (f", {DEVICE_NODES_UNIT} run again ({'; '.join(why)})" if why else ""),
        units=wanted,
        restarted=[DEVICE_NODES_UNIT] if why else [],
        daemon_reload=changes,
    )
