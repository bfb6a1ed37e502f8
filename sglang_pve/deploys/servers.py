"""One systemd unit per server configuration; exactly the active one runs, switched atomically.

The files go in place first (the running server is untouched); then, when what runs changed (the
active configuration, its files, the NCCL profile, the SGLang version), a release is recorded on
the host and switched to: stop -> GPUs verified free -> start -> readiness gate, reverted to the
previous release when the gate fails (the run then fails naming the diagnosis).
"""

import os
from pathlib import Path

from pyinfra import state
from pyinfra.api import deploy

from sglang_pve.deploy import provenance
from sglang_pve.deploy.context import deployment, site_packages, unit_host, venv
from sglang_pve.deploy.operations import releases
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploy.render import release, server_files
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import is_node


@deploy("Servers")
@locked("servers")
def servers() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    config = deployment()
    project = Path(state.cwd or os.getcwd())
    releases.release(  # the units first, then the release: one operation, one read (its docstring says why)
        name=f"Server units ({len(config.servers)}) and release: {config.data.active_server or 'no server'} on "
        f"SGLang {config.sglang_version}",
        release=release(config, venv(), site_packages(), provenance.who(), provenance.commit(project), unit_host()),
        keep=config.data.releases_kept,
        venvs_dir=config.data.sglang_venvs_dir,
        lease=run_token(),
        units={name: server_files(config, server, venv(), unit_host()) for name, server in config.servers.items()},
    )
