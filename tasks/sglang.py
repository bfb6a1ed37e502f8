"""The pinned SGLang release in its own virtualenv (earlier releases stay installed)."""

from sglang_pve.context import deployment, venv
from sglang_pve.operations import release
from sglang_pve.provision import is_node

if not is_node():  # a container's task; Proxmox nodes get tasks/pve_host.py and tasks/containers.py
    data = deployment().data
    release.installed(
        name=f"SGLang {data.sglang_version}",
        venv=venv(),
        version=data.sglang_version,
        index_url=data.sglang_index_url,
        extra_index_urls=data.sglang_extra_index_urls,
    )
