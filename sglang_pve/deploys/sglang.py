"""The SGLang build in its own virtualenv, built beside its final path from a hash lock and moved
into place only when complete (earlier versions' venvs are kept while a release needs them)."""

from pyinfra.api import deploy

from sglang_pve.deploy.context import deployment, package_source, site_packages, venv
from sglang_pve.deploy.operations import venvs
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploy.render import nccl_files
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import is_node


@deploy("SGLang venv")
@locked("sglang venv")
def sglang_venv() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    config = deployment()
    purelib = site_packages()
    venvs.venv(
        name=f"SGLang {config.sglang_version}",
        path=venv(),
        version=config.sglang_version,
        source=package_source(hooks=[f for f in nccl_files(config, purelib) if f.path.startswith(venv() + "/")]),
        run=run_token(),
    )
