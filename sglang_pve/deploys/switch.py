"""Switch the running configuration atomically (option ``server``: --data server=NAME).

A new release of the files in place with NAME active: stop -> GPUs verified free -> start ->
readiness gate; when the gate fails, the previous release runs again and the run fails naming
the diagnosis. The next whole deploy switches back to the inventory's active_server.
"""

from pyinfra.api import deploy

from sglang_pve.config.tasks import switch_options
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
    config = deployment()
    wanted = task_options(switch_options)
    releases.switched(
        name=f"Switch to {wanted.server}",
        server=wanted.server,
        keep=config.data.releases_kept,
        venvs_dir=config.data.sglang_venvs_dir,
        lease=run_token(),
    )
