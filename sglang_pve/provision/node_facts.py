"""Everything a node's deploy reads on the node, in ONE remote command per run: its GPUs and device
nodes (GpuDevices), the node preparation's files (their digests), its PVE node name (uname -n:
PVE::INotify::nodename), the restarts owed (RestartDebts) and every container's raw lxc.* lines
(RawLxcLines). The node preparation renders and decides from it, and every container operation of
the node plans from it: a no-change run then costs the node this read, the node files' own check
and their units' one, for 1 or 16 containers (pyinfra 3 caches no fact: read once per node host).

    node_state(node_host)
    # NodeState(gpus=GpuDeviceInfo(...), hostname="pve1", files={"/etc/modules-load.d/nvidia.conf":
    #           FileState(...), ...}, debts={}, raw={129: [["lxc.mount.entry", "..."]]})
"""

import threading
import weakref
from dataclasses import dataclass

from pyinfra.api import FactBase

from sglang_pve.deploy.facts import batched
from sglang_pve.deploy.facts.files import FileState, digest_script, parse_digests
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo, GpuDevices
from sglang_pve.provision.node_prep import NODE_PREP_PATHS
from sglang_pve.provision.nodes import Node
from sglang_pve.provision.raw_lines import RawLxcLines
from sglang_pve.provision.restart_debt import Debt, RestartDebts


@dataclass(frozen=True)
class NodeState:
    gpus: GpuDeviceInfo
    hostname: str  # uname -n
    files: dict[str, FileState | None]  # the node preparation's files
    debts: dict[int, Debt]
    raw: dict[int, list[list[str]]]


class NodeFacts(FactBase[NodeState]):
    """GpuDevices, uname -n, the digests of `paths`, RestartDebts and RawLxcLines of every
    container of PVE node `node`, in one command: each part's own command and parser.

    host.get_fact(NodeFacts, paths=["/etc/modules-load.d/nvidia.conf"], etc_pve="/etc/pve", node="pve1",
                  debt_dir="/var/lib/sglang-pve/restart-owed")
    """

    def command(self, paths, etc_pve, node, debt_dir):
        return batched.joined(
            [
                GpuDevices().command(),
                "uname -n",
                digest_script(list(paths)),
                RestartDebts().command(debt_dir),
                RawLxcLines().command(etc_pve, node),
            ]
        )

    def process(self, output):
        gpus, hostname, files, debts, raw = (part or [] for part in batched.split(output, 5))
        return NodeState(
            gpus=GpuDevices().process(gpus),
            hostname=hostname[0].strip() if hostname else "",
            files=parse_digests(files),
            debts=RestartDebts().process(debts),
            raw=RawLxcLines().process(raw),
        )


_states: "weakref.WeakKeyDictionary[object, NodeState]" = weakref.WeakKeyDictionary()
_reading = threading.RLock()  # a greenlet's under pyinfra_cli (threading patched), as nodes.py's


def node_state(node_host, node: Node) -> NodeState:
    """The node's NodeFacts, read once per node host per run (`node`: its API settings: the PVE
    node name, /etc/pve and the debt directory)."""
    with _reading:  # a fleet member's deploy reads its node's too (fleet_restart.py): still once
        if node_host not in _states:
            _states[node_host] = node_host.get_fact(
                NodeFacts, paths=NODE_PREP_PATHS, etc_pve=node.etc_pve, node=node.name, debt_dir=node.debt_dir
            )
        return _states[node_host]
