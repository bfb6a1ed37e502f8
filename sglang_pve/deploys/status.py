"""What runs where: per host, the current release (id, SGLang version, how it differs from the
release before it), and per server configuration: unit state, startup phase and time in it,
health, restarts, verdict (ready / starting / stalled / zombie since T / failed: why / stopped),
last log line, latest diagnosis, per-GPU memory and utilization, and any foreign process holding
the GPUs; on a router's host, each router's health, its workers' states and its own metrics. Two
remote commands per host (one more per router); changes nothing."""

from pyinfra import host, logger
from pyinfra.api import deploy

from sglang_pve.agent import contract
from sglang_pve.deploy import paths, replicas
from sglang_pve.deploy.facts.releases import Releases
from sglang_pve.deploy.facts.router import RouterStatus
from sglang_pve.deploy.facts.server_status import ServerStatus
from sglang_pve.provision.roles import is_node
from sglang_pve.tools.status_render import render, render_release, render_router


@deploy("Status")
def status() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    logger.info(
        render_release(host.name, host.get_fact(Releases)) + "\n" + render(host.name, host.get_fact(ServerStatus))
    )
    for name, replica_set in sorted(replicas.routed_by(host).items()):
        at = contract.probe_address(replica_set.router.bind)
        report = host.get_fact(
            RouterStatus,
            router=replicas.url_of(at, replica_set.router.port),
            metrics=replicas.url_of(at, replica_set.router.prometheus_port) + "/metrics",
            key_file=paths.router_key_path(name),
        )
        logger.info(render_router(host.name, name, report))
