"""Everything the release operation's server units part compares (operations/systemd.py
unit_commands), in one remote command: file digests, which
sglang-* units exist in the unit directory and whether each carries the toolkit's marker, and
each declared unit's systemd state."""

import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from sglang_pve.agent import systemd
from sglang_pve.agent.contract import MARKER, SERVER_NAME, UNIT_PREFIX
from sglang_pve.deploy.facts.files import FileState, digest_script, parse_digests
from sglang_pve.deploy.paths import LOG_DIR, UNIT_DIR

_PROPERTIES = "Id,LoadState,ActiveState,SubState,UnitFileState,Result,NeedDaemonReload"
_UNITS, _SHOW, _LOG_DIR = "--- units", "--- show", "--- log dir"


@dataclass(frozen=True)
class UnitState:
    active: str  # ActiveState: active, activating, deactivating, failed, inactive
    sub: str
    enabled: str  # UnitFileState: enabled, disabled, "" when not loaded
    result: str
    need_reload: bool = False  # NeedDaemonReload: the file changed since systemd loaded it


@dataclass
class ServersState:
    files: dict[str, FileState | None] = field(default_factory=dict)
    installed: dict[str, bool] = field(default_factory=dict)  # unit file in UNIT_DIR -> carries MARKER
    units: dict[str, UnitState] = field(default_factory=dict)
    log_dir: bool = False  # whether LOG_DIR exists as a root-only (0700) directory, not a link


def server_of(unit: str) -> str | None:
    """The server configuration a unit name belongs to, None for names the toolkit never makes."""
    name = unit.removeprefix(UNIT_PREFIX).removesuffix(".service")
    ours = unit.startswith(UNIT_PREFIX) and unit.endswith(".service") and SERVER_NAME.fullmatch(name)
    return name if ours else None


def parse_show(lines: list[str]) -> dict[str, UnitState]:
    """`systemctl show -p Id,...` for several units (the agent's parser), the loaded ones by Id."""
    return {
        b["Id"]: UnitState(
            b.get("ActiveState", ""),
            b.get("SubState", ""),
            b.get("UnitFileState", ""),
            b.get("Result", ""),
            b.get("NeedDaemonReload") == "yes",
        )
        for b in systemd.parse_show(lines)
        if b.get("LoadState") == "loaded" and b.get("Id")
    }


class ServerUnits(FactBase[ServersState]):
    """State of the server units and their files.

    host.get_fact(ServerUnits, paths=["/etc/systemd/system/sglang-baseline.service", ...],
                  units=["sglang-baseline.service"])
    # ServersState(files={...}, installed={"sglang-baseline.service": True, "sglang-router.service": False},
    #              units={"sglang-baseline.service": UnitState("active", "running", "enabled", "success")})
    """

    @staticmethod
    def default() -> ServersState:
        return ServersState()

    def command(self, paths, units):
        declared = " ".join(shlex.quote(u) for u in units)
        marker, unit_glob = shlex.quote(MARKER), f"{shlex.quote(UNIT_DIR)}/{shlex.quote(UNIT_PREFIX)}*.service"
        return (
            f"{digest_script(list(paths))}; echo {shlex.quote(_UNITS)}; "
            f'for f in {unit_glob}; do [ -f "$f" ] || continue; '
            f'if head -c 512 "$f" | grep -qF {marker}; then echo "ours ${{f##*/}}"; '
            f'else echo "foreign ${{f##*/}}"; fi; done; '
            f'[ -d {LOG_DIR} ] && [ ! -L {LOG_DIR} ] && [ "$(stat -c %a:%u {LOG_DIR})" = 700:0 ] '
            f"&& echo {shlex.quote(_LOG_DIR)}; "
            f"echo {shlex.quote(_SHOW)}; systemctl show --property={_PROPERTIES} {declared}"
        )

    def process(self, output):
        units, show = output.index(_UNITS), output.index(_SHOW)
        installed = {}
        for line in output[units + 1 : show]:
            if line == _LOG_DIR:
                continue
            owner, _, unit = line.partition(" ")
            installed[unit] = owner == "ours" and server_of(unit) is not None
        return ServersState(
            files=parse_digests(output[:units]),
            installed=installed,
            units=parse_show(output[show + 1 :]),
            log_dir=_LOG_DIR in output[units:show],
        )
