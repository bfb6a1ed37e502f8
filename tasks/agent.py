"""The lifecycle agent (readiness gate, watchdog, GPU reaper, status): one stdlib-only zipapp;
and the size-capped rotation of the server logs it follows."""

from sglang_pve.agent import zipapp
from sglang_pve.deploy import paths
from sglang_pve.deploy.operations import files
from sglang_pve.deploy.render import logrotate_file
from sglang_pve.provision.roles import is_node

if not is_node():  # a container's task; Proxmox nodes get tasks/pve_host.py and tasks/containers.py
    files.file_set(
        name="Lifecycle agent and log rotation",
        files=[files.ManagedFile(paths.AGENT, zipapp.build(), mode="755"), logrotate_file()],
    )
