"""Everything the servers operation compares, in one remote command: file digests, which
sglang-* units exist, and each unit's systemd state."""

import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from ..paths import LOG_DIR, UNIT_DIR, UNIT_PREFIX
from .files import FileState, digest_script, parse_digests

_PROPERTIES = "Id,LoadState,ActiveState,SubState,UnitFileState,Result"
_UNITS, _SHOW, _LOG_DIR = "--- units", "--- show", "--- log dir"


@dataclass(frozen=True)
class UnitState:
    active: str  # ActiveState: active, activating, deactivating, failed, inactive
    sub: str
    enabled: str  # UnitFileState: enabled, disabled, "" when not loaded
    result: str

    @property
    def running(self) -> bool:
        return self.active in ("active", "activating", "reloading")


@dataclass
class ServersState:
    files: dict[str, FileState | None] = field(default_factory=dict)
    installed: list[str] = field(default_factory=list)  # unit names with a file in UNIT_DIR
    units: dict[str, UnitState] = field(default_factory=dict)
    log_dir: bool = False  # whether LOG_DIR exists, root-only (SGLang logs its server_args, API key included)


def parse_show(lines: list[str]) -> dict[str, UnitState]:
    """Parse `systemctl show -p Id,...` for several units (each block starts with Id=)."""
    blocks, current = [], {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "Id" and current:
            blocks.append(current)
            current = {}
        current[key] = value
    if current:
        blocks.append(current)
    return {
        b["Id"]: UnitState(b.get("ActiveState", ""), b.get("SubState", ""), b.get("UnitFileState", ""), b.get("Result", ""))
        for b in blocks
        if b.get("LoadState") == "loaded"
    }


class ServerUnits(FactBase[ServersState]):
    """State of the server units and their files.

    host.get_fact(ServerUnits, paths=["/etc/systemd/system/sglang-baseline.service", ...],
                  units=["sglang-baseline.service"])
    # ServersState(files={...}, installed=["sglang-baseline.service"],
    #              units={"sglang-baseline.service": UnitState("active", "running", "enabled", "success")})
    """

    @staticmethod
    def default() -> ServersState:
        return ServersState()

    def command(self, paths, units):
        unit_glob = f"{UNIT_PREFIX}*.service"
        declared = " ".join(shlex.quote(u) for u in units)
        return (
            f"{digest_script(list(paths))}; echo {shlex.quote(_UNITS)}; "
            f"installed=$(cd {UNIT_DIR} && ls {unit_glob} 2>/dev/null); echo \"$installed\"; "
            f"[ -d {LOG_DIR} ] && [ ! -L {LOG_DIR} ] && [ \"$(stat -c %a:%u {LOG_DIR})\" = 700:0 ] && echo {shlex.quote(_LOG_DIR)}; "
            f"echo {shlex.quote(_SHOW)}; systemctl show --property={_PROPERTIES} {declared} $installed"
        )

    def process(self, output):
        first, second = output.index(_UNITS), output.index(_SHOW)
        return ServersState(
            files=parse_digests(output[:first]),
            installed=[line for line in output[first + 1 : second] if line.strip() and line != _LOG_DIR],
            units=parse_show(output[second + 1 :]),
            log_dir=_LOG_DIR in output[first:second],
        )
