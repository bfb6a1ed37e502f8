"""prometheus-node-exporter: the agent's metrics file reaches Prometheus through its textfile
collector (deploy/operations/node_exporter.py), on node_exporter's port 9100 that
tasks/scrape_targets.py lists as the host's `node` target."""

from pyinfra.api import deploy

from sglang_pve.deploy.context import basics
from sglang_pve.deploy.operations import node_exporter as node_exporter_ops
from sglang_pve.provision.roles import is_node


@deploy("Node exporter")
def node_exporter() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    node_exporter_ops.exporter(
        name="prometheus-node-exporter, reading the agent's metrics",
        found=basics().node_exporter,  # read with the host's other basics: no command of its own
    )
