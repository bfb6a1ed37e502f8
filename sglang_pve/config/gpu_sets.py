"""Which of a node's GPUs each of its containers gets (host data ``container.gpus``), checked for
the whole node at once, before any change: every index must be a GPU the node's driver has, and no
GPU goes to two containers of the node unless both say ``gpus_shared: true`` (the inventory's
containers all run: the toolkit starts every one it provisions).

>>> from sglang_pve.config.proxmox import ContainerSpec
>>> base = dict(node="pve1", hostname="a", template="local:vztmpl/d.tar.zst", unprivileged=True,
...             cores=1, memory=512, rootfs={"storage": "local-zfs", "size_gb": 8},
...             net0={"bridge": "vmbr0", "ip": "dhcp"})
>>> a = ContainerSpec(vmid=101, gpus=[0, 1], **base)
>>> b = ContainerSpec(vmid=102, gpus=[1, 9], **base)
>>> [(host, p.key, p.value) for host, p in gpu_set_problems("pve1", [0, 1, 2, 3], {"a": a, "b": b})]
[('b', 'container.gpus', [1, 9]), ('b', 'container.gpus', [1, 9])]
"""

from collections.abc import Mapping

from sglang_pve.config.errors import Problem
from sglang_pve.config.proxmox import ContainerSpec


def wanted_gpus(spec: ContainerSpec, node_gpus: list[int]) -> list[int]:
    """The GPU indices the container gets on a node whose driver has ``node_gpus``."""
    return sorted(node_gpus) if spec.gpus == "all" else sorted(spec.gpus)


def gpu_set_problems(
    node: str, node_gpus: list[int], containers: Mapping[str, ContainerSpec]
) -> list[tuple[str, Problem]]:
    """(host, problem) for every container of ``node`` (host name -> spec) whose GPU set the node
    cannot give: an index it has not, or a GPU another container of the node already holds."""
    problems: list[tuple[str, Problem]] = []
    holders: dict[int, str] = {}
    have = ", ".join(map(str, sorted(node_gpus))) or "none"
    for host, spec in containers.items():
        missing = [i for i in wanted_gpus(spec, node_gpus) if i not in node_gpus]
        if missing:
            problems.append(
                (
                    host,
                    Problem(
                        "container.gpus",
                        spec.gpus,
                        f"{node} has {len(node_gpus)} GPU(s) (indices {have}), not GPU {', '.join(map(str, missing))}",
                        f"give only indices {node} has (nvidia-smi -L on {node}), or load the driver there",
                    ),
                )
            )
        shared = [
            (i, holders[i])
            for i in wanted_gpus(spec, node_gpus)
            if i in holders and not (spec.gpus_shared and containers[holders[i]].gpus_shared)
        ]
        if shared:
            gpu, other = shared[0]
            problems.append(
                (
                    host,
                    Problem(
                        "container.gpus",
                        spec.gpus,
                        f"GPU {', '.join(str(i) for i, _ in shared)} of {node} also go(es) to {other} "
                        f"(container.gpus = {containers[other].gpus!r}), and both run",
                        f"give each container of {node} its own GPUs, or set container.gpus_shared: true on "
                        f"both {host} and {other} (they then share the GPUs' memory and compute)",
                    ),
                )
            )
        for i in wanted_gpus(spec, node_gpus):
            holders.setdefault(i, host)
    return problems
