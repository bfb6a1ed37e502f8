"""Server configurations as systemd units: files and daemon-reload, the commands the release
operation runs first (which one runs: releases.py)."""

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand

from sglang_pve.config.safe import printable
from sglang_pve.deploy import paths
from sglang_pve.deploy.facts.servers import ServersState, server_of
from sglang_pve.deploy.operations.files import ManagedFile, converge


def _warn_foreign(current: ServersState, declared: dict[str, str]) -> set[str]:
    """Units with our prefix that do not carry our marker are someone else's: name them, touch
    nothing of theirs. Returns the declared servers whose unit name is taken that way."""
    foreign = sorted(unit for unit, ours in current.installed.items() if not ours)
    taken = {name for name, unit in declared.items() if unit in foreign}
    if foreign:
        names = printable(", ".join(foreign))
        logger.warning(f"{host.print_prefix}left alone, not managed by sglang-pve (no marker): {names}")
    for name in sorted(taken):
        logger.warning(
            f"{host.print_prefix}server configuration {name} is not deployed: {declared[name]} exists and "
            "is not managed by sglang-pve; rename the configuration in servers.yml or remove that unit"
        )
    return taken


def unit_commands(files: dict[str, list[ManagedFile]], current: ServersState) -> list:
    """
    The commands that install one systemd unit (plus its SGLang config and lifecycle spec) per server
    configuration and remove the units of configurations no longer declared, from the ServerUnits
    fact `current` (read with unit_fact_args); [] when all is in place. The release operation
    (deploy/operations/releases.py release, units=) runs them before it records and switches: which
    one runs is the release's business (the switch stops, starts, enables and disables units), so
    the running server stays up until every file of the new release is in place.

    + files: server name -> its files (sglang_pve.deploy.render.server_files)

    Only units that carry the toolkit's marker are changed or removed: an operator's own
    sglang-router.service and its files are left alone, named in a warning. daemon-reload runs
    when a unit file changed, one was removed, or systemd says one needs it (a run killed
    between a unit's write and its reload).

    **Example:**

    .. code:: python

        unit_commands({"baseline": server_files(deployment, baseline, venv)}, host.get_fact(ServerUnits, ...))
    """
    declared = {name: paths.unit_name(name) for name in files}
    taken = _warn_foreign(current, declared)
    wanted = [f for name, fs in files.items() if name not in taken for f in fs]
    stale = sorted(unit for unit, ours in current.installed.items() if ours and unit not in declared.values())

    units_changed = any(f.path.endswith(".service") and f.differs(current.files.get(f.path)) for f in wanted)
    commands = list(converge(wanted, current.files))
    if not current.log_dir:  # root-only: SGLang logs its server_args, API key included
        commands.insert(
            0, StringCommand("install", "-d", "-m", "700", "-o", "root", "-g", "root", QuoteString(paths.LOG_DIR))
        )

    for unit in stale:
        server = server_of(unit)
        assert server is not None  # `installed` counts a unit as ours only with a name the toolkit makes
        commands.append(StringCommand("systemctl", "disable", "--now", QuoteString(unit)))
        commands.append(StringCommand("rm", "-f", *map(QuoteString, paths.server_paths(server))))
    if units_changed or stale or any(unit.need_reload for unit in current.units.values()):
        commands.append(StringCommand("systemctl", "daemon-reload"))
    return commands


def unit_fact_args(files: dict[str, list[ManagedFile]]) -> dict:
    """ServerUnits' arguments for these servers' files: every file's path and every declared unit."""
    return {"paths": [f.path for fs in files.values() for f in fs], "units": [paths.unit_name(n) for n in files]}
