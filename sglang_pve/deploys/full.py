"""The whole deploy, in order. Proxmox nodes (group pve_nodes) are prepared and provision their
containers through the API first; then every container gets its deploy. A container that does not
exist yet is deployed right after its node created it, in the same run (provision/connector.py
says how). Host data is validated first, for every host, before any remote command changes anything.
"""

from pyinfra.api import deploy

from sglang_pve.deploy.context import deployment
from sglang_pve.deploys.agent import agent
from sglang_pve.deploys.containers import provision_containers
from sglang_pve.deploys.locked import locked
from sglang_pve.deploys.nccl_env import nccl_env
from sglang_pve.deploys.node_exporter import node_exporter
from sglang_pve.deploys.node_prep import prepare_node
from sglang_pve.deploys.preflight import preflight
from sglang_pve.deploys.router import router
from sglang_pve.deploys.servers import servers
from sglang_pve.deploys.sglang import sglang_venv
from sglang_pve.provision.fleet_restart import restart_owed
from sglang_pve.provision.guest_deploy import deploy_when_provisioned, nodes_done
from sglang_pve.provision.roles import is_node, own_spec, pending


def container_deploy() -> None:
    """A container's part, in order. Each call on its own line: pyinfra orders a host's operations
    by the line numbers of their call stack, so a loop over these would order them by the lines
    inside each module instead (host.loop exists for loops; this needs none)."""
    preflight()  # reads the host; refuses before any change
    agent()  # the deploy lock is the agent's
    guest_changes()


@locked("deploy")
def guest_changes() -> None:
    """Everything that changes what runs, under the container's deploy lock (one run at a time)."""
    restart_owed(name="Container restart provisioning owes a replica or TP rank, the fleet's way")  # lock re-taken
    node_exporter()  # the agent's metrics reach Prometheus through it
    sglang_venv()
    nccl_env()
    servers()
    router()  # after every replica's servers: its workers are the ones that came up


@deploy("sglang-pve")
def full_deploy() -> None:
    """Every host of the inventory: nodes, then containers (one call from a deploy file)."""
    if is_node():
        prepare_node()
        provision_containers(rolled=True)  # a replica's or TP rank's restart: its own deploy's (restart_owed)
    nodes_done(name="Nodes prepared and containers provisioned")  # every host: the containers' deploy waits for it
    if is_node():
        return
    own_spec()  # its container spec and deploy data: every problem at once, before any operation
    deployment()
    waiting_for = pending()
    if waiting_for:
        deploy_when_provisioned(
            name="Deploy into the container once its node provisioned it",
            deploy=container_deploy,
            waiting_for=waiting_for,
        )
    else:
        container_deploy()
