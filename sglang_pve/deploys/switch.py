"""Switch the running configuration atomically (option ``server``: --data server=NAME).

A new release of the files in place with NAME active: stop -> GPUs verified free -> start ->
readiness gate; when the gate fails, the previous release runs again and the run fails naming
the diagnosis. The next whole deploy switches back to the inventory's active_server.
A replica switches out of its router (deploy/rollout.py); a TP group's ranks switch together and
are refused when the run leaves one out (deploy/fleet.py).
"""

from pyinfra import host
from pyinfra.api import deploy

from sglang_pve.config.tasks import switch_options
from sglang_pve.deploy import fleet
from sglang_pve.deploy.context import deployment, task_options
from sglang_pve.deploy.operations import releases
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import is_node


@deploy("Switch")
@locked("switch")
def switch() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    problem = fleet.group_problem(host, "tasks/switch.py")
    if problem is not None:
        raise fleet.refused(host, problem)
    config = deployment()
    wanted = task_options(switch_options)
    releases.switched(
        name=f"Switch to {wanted.server}",
        server=wanted.server,
        keep=config.data.releases_kept,
        venvs_dir=config.data.sglang_venvs_dir,
        lease=run_token(),
    )
