"""The lifecycle agent (readiness gate, watchdog, GPU reaper, status): one stdlib-only zipapp."""

from sglang_pve import paths
from sglang_pve.agent import zipapp
from sglang_pve.operations import files

files.file_set(name="Lifecycle agent", files=[files.ManagedFile(paths.AGENT, zipapp.build(), mode="755")])
