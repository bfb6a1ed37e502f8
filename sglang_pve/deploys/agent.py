"""The lifecycle agent (readiness gate, watchdog, GPU reaper, status): one stdlib-only zipapp,
built from the installed package, and its copy compiled on the host by the interpreter the units
run it with (agent/zipapp.py: its starts then compile nothing); and the size-capped rotation of
the server logs it follows."""

import shlex

from pyinfra.api import deploy

from sglang_pve.agent import zipapp
from sglang_pve.agent.contract import TARGET_PYTHON
from sglang_pve.deploy import paths
from sglang_pve.deploy.operations import files
from sglang_pve.deploy.render import logrotate_file
from sglang_pve.provision.roles import is_node


@deploy("Agent")
def agent() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    files.file_set(
        name="Lifecycle agent and log rotation",
        files=[files.ManagedFile(paths.AGENT, zipapp.build(), mode="755"), logrotate_file()],
        # after a change only: a copy that went missing since costs the agent's starts the compile
        then=[shlex.join([TARGET_PYTHON, paths.AGENT, "compile"])],
    )
