"""The LXC containers of this Proxmox node (group pve_nodes), through its API.

Every inventory host whose ``container.node`` names this node: created when absent (GPUs passed
through as devN, or raw lines; model storage as raw bind-mount lines, so snapshots stay possible),
otherwise changed key by key after a snapshot, started, its SSH host key pinned; one operation for
all of them, so that their create and start tasks run at once (provision/container.py). ``--dry --diff``
shows the config diff and writes nothing through the API. First, the node's NVIDIA device nodes
are checked (device_nodes.present): a missing or wrong one refuses every container write. Before
that, the GPU sets of all the node's containers (config/gpu_sets.py): every problem of every
container at once, before any operation of the node.
"""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config.errors import ConfigError
from sglang_pve.config.gpu_sets import gpu_set_problems
from sglang_pve.provision import device_nodes
from sglang_pve.provision.container import containers as node_containers
from sglang_pve.provision.roles import containers, is_node, node_gpus, this_node


@deploy("Containers")
def provision_containers(rolled: bool = False) -> None:
    """A node's task; container hosts are skipped. `rolled`: the members' deploys follow in this run
    (deploy.py), which restart a replica or TP rank the fleet's way (provision/fleet_restart.py);
    without them (tasks/containers.py) such a restart is refused before any write."""
    if not is_node():
        return
    node = this_node()
    gpus = node_gpus()
    found = containers()
    refuse_gpu_sets(host.name, gpus.gpu_indices, {name: spec for name, spec, _ in found})
    if found:
        device_nodes.present(name="NVIDIA device nodes as the driver numbers them", gpus=gpus)
        node_containers(
            name=("Containers " if len(found) > 1 else "Container ")
            + ", ".join(f"{spec.vmid} ({name})" for name, spec, _ in found),
            members=[(spec, guest) for _, spec, guest in found],
            node=node,
            gpus=gpus,
            rolled=rolled,
        )


def refuse_gpu_sets(node: str, node_gpus: list[int], specs: dict) -> None:
    """Raise one PyinfraError naming every GPU-set problem of the node's containers (host, key, value, fix)."""
    problems = gpu_set_problems(node, node_gpus, specs)
    if problems:
        by_host: dict[str, list] = {}
        for name, problem in problems:
            by_host.setdefault(name, []).append(problem)
        raise PyinfraError("\n".join(str(ConfigError(name, found)) for name, found in by_host.items()))
