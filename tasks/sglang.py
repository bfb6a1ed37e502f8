"""The pinned SGLang release in its own virtualenv (earlier releases stay installed)."""

from sglang_pve.context import deployment, venv
from sglang_pve.operations import release

data = deployment().data
release.installed(
    name=f"SGLang {data.sglang_version}",
    venv=venv(),
    version=data.sglang_version,
    index_url=data.sglang_index_url,
    extra_index_urls=data.sglang_extra_index_urls,
)
