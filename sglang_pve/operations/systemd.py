"""Server configurations as systemd units: files, daemon-reload, and exactly one running."""

from pyinfra import host
from pyinfra.api import StringCommand, operation

from .. import paths
from ..facts.servers import ServerUnits
from .files import ManagedFile, converge


def _stale_files(unit: str) -> list[str]:
    server = unit.removeprefix(paths.UNIT_PREFIX).removesuffix(".service")
    return [paths.unit_path(server), paths.server_config_path(server), paths.lifecycle_path(server)]


@operation()
def server_units(files: dict[str, list[ManagedFile]], active: str | None):
    """
    Install one systemd unit (plus its SGLang config and lifecycle spec) per server configuration,
    remove units of configurations no longer declared, and make exactly `active` run.

    + files: server name -> its files (sglang_pve.render.server_files)
    + active: the server that must run (enabled at boot); None stops them all

    daemon-reload runs only when a unit file changed; a running server restarts only when its own
    files changed (its unit carries the checksum of the NCCL profile it starts with).

    **Example:**

    .. code:: python

        server_units(files={"baseline": server_files(deployment, baseline, venv)}, active="baseline")
    """
    declared = {name: paths.unit_name(name) for name in files}
    wanted = [f for server_files in files.values() for f in server_files]
    current = host.get_fact(ServerUnits, paths=[f.path for f in wanted], units=list(declared.values()))
    stale = [unit for unit in current.installed if unit not in declared.values()]

    changed = {name: any(f.differs(current.files.get(f.path)) for f in fs) for name, fs in files.items()}
    units_changed = any(f.path.endswith(".service") and f.differs(current.files.get(f.path)) for f in wanted)
    commands = list(converge(wanted, current.files))
    if not current.log_dir:
        commands.insert(0, StringCommand("mkdir", "-p", paths.LOG_DIR))

    for unit in stale:
        commands.append(StringCommand("systemctl", "disable", "--now", unit))
        commands.append(StringCommand("rm", "-f", *_stale_files(unit)))
    if units_changed or stale:
        commands.append(StringCommand("systemctl", "daemon-reload"))

    for name, unit in declared.items():
        state = current.units.get(unit)
        if name != active and state:
            if state.running:
                # SGLang ends its drain on SIGTERM by SIGKILLing its own tree, so systemd marks every
                # stop "failed (signal)"; a stop we asked for is not a failure worth keeping.
                commands.append(StringCommand("systemctl", "stop", unit, "&&", "systemctl", "reset-failed", unit))
            if state.enabled == "enabled":
                commands.append(StringCommand("systemctl", "disable", unit))
    if active:
        unit, state = declared[active], current.units.get(declared[active])
        if not state or state.enabled != "enabled":
            commands.append(StringCommand("systemctl", "enable", unit))
        # `start` returns when the unit is active: after the readiness gate, not at fork.
        if not state or not state.running:
            commands.append(StringCommand("systemctl", "start", unit))
        elif changed[active]:
            commands.append(StringCommand("systemctl", "restart", unit))

    if not commands:
        host.noop(f"{len(files)} server unit(s) up to date, {active or 'none'} running")
        return
    yield from commands
