"""The SGLang build in its own virtualenv, built beside its final path from a hash lock and moved
into place only when complete (earlier versions' venvs are kept while a release needs them)."""

from pyinfra import host

from sglang_pve.context import deployment, package_source, venv
from sglang_pve.facts.python import VenvSitePackages
from sglang_pve.operations import venvs
from sglang_pve.provision import is_node
from sglang_pve.render import nccl_files

if not is_node():  # a container's task; Proxmox nodes get tasks/pve_host.py and tasks/containers.py
    config = deployment()
    site_packages = host.get_fact(VenvSitePackages, path=venv())
    venvs.venv(
        name=f"SGLang {config.sglang_version}",
        path=venv(),
        version=config.sglang_version,
        source=package_source(hooks=[f for f in nccl_files(config, site_packages) if f.path.startswith(venv() + "/")]),
    )
