"""Server configurations as systemd units: files and daemon-reload (which one runs: releases.py)."""

from pyinfra import host
from pyinfra.api import StringCommand, operation

from .. import paths
from ..facts.servers import ServerUnits
from .files import ManagedFile, converge


def _stale_files(unit: str) -> list[str]:
    server = unit.removeprefix(paths.UNIT_PREFIX).removesuffix(".service")
    return [paths.unit_path(server), paths.server_config_path(server), paths.lifecycle_path(server),
            paths.secret_config_path(server), paths.secret_env_path(server)]


@operation()
def server_units(files: dict[str, list[ManagedFile]]):
    """
    Install one systemd unit (plus its SGLang config and lifecycle spec) per server configuration
    and remove the units of configurations no longer declared. Which one runs is the release's
    business (operations/releases.py): the switch stops, starts, enables and disables units, so
    the running server stays up until every file of the new release is in place.

    + files: server name -> its files (sglang_pve.render.server_files)

    daemon-reload runs only when a unit file changed.

    **Example:**

    .. code:: python

        server_units(files={"baseline": server_files(deployment, baseline, venv)})
    """
    declared = {name: paths.unit_name(name) for name in files}
    wanted = [f for server_files in files.values() for f in server_files]
    current = host.get_fact(ServerUnits, paths=[f.path for f in wanted], units=list(declared.values()))
    stale = [unit for unit in current.installed if unit not in declared.values()]

    units_changed = any(f.path.endswith(".service") and f.differs(current.files.get(f.path)) for f in wanted)
    commands = list(converge(wanted, current.files))
    if not current.log_dir:  # root-only: SGLang logs its server_args, API key included
        commands.insert(0, StringCommand("install", "-d", "-m", "700", "-o", "root", "-g", "root", paths.LOG_DIR))

    for unit in stale:
        commands.append(StringCommand("systemctl", "disable", "--now", unit))
        commands.append(StringCommand("rm", "-f", *_stale_files(unit)))
    if units_changed or stale:
        commands.append(StringCommand("systemctl", "daemon-reload"))

    if not commands:
        host.noop(f"{len(files)} server unit(s) up to date")
        return
    yield from commands
