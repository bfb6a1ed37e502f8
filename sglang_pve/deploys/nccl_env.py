"""One NCCL profile everywhere a process can start from: the units' EnvironmentFile, NCCL's own
/etc/nccl.conf, a startup hook in the venv's site-packages (a .pth importing the profile module:
Debian/Ubuntu's own sitecustomize.py shadows a venv's), and a managed block in the user's shell rc:
one operation, whose one read checks them all (issue 17: a no-change run's commands)."""

from pyinfra.api import deploy

from sglang_pve.deploy import paths
from sglang_pve.deploy.context import deployment, site_packages
from sglang_pve.deploy.operations import files
from sglang_pve.deploy.render import NCCL_BLOCK_LINE, nccl_block, nccl_files
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import is_node


@deploy("NCCL environment")
@locked("nccl env")
def nccl_env() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    config = deployment()
    profile = config.data.nccl_profile
    files.file_set(
        name=f"NCCL profile {profile}: nccl.env, nccl.conf, venv startup hook, {config.data.shell_rc}",
        files=nccl_files(config, site_packages()),
        block=files.ManagedBlock(
            path=config.data.shell_rc,
            marker=paths.NCCL_BLOCK_MARKER,
            body=nccl_block(config),
            user=config.data.shell_user,
            shown=NCCL_BLOCK_LINE,
        ),
    )
