"""The systemd state of a few units, in one remote command: what deploy/operations/units.py
decides from (started, restarted, enabled, daemon-reload), where pyinfra's systemd.service asks
SystemdStatus and SystemdEnabled, one command each per unit (pyinfra operations/systemd.py
service, 3.10.0)."""

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from sglang_pve.agent import systemd

_PROPERTIES = "Id,LoadState,SubState,UnitFileState,NeedDaemonReload,Job"
# What pyinfra counts as running and as enabled (facts/systemd.py SystemdStatus.state_values,
# SystemdEnabled.state_values, 3.10.0): a oneshot with RemainAfterExit= is "exited" once it ran.
RUNNING = ("running", "waiting", "exited", "listening", "mounted")
ENABLED = ("enabled", "static")


@dataclass(frozen=True)
class UnitInfo:
    load: str  # LoadState: loaded, not-found, masked, ...
    sub: str  # SubState: running, exited, dead, failed, ...
    enabled: str  # UnitFileState: enabled, disabled, static, "" when not found
    need_reload: bool = False  # NeedDaemonReload: its file changed since systemd loaded it
    queued: bool = False  # Job: systemd has a job queued for it (at boot: its start, waiting)

    @property
    def running(self) -> bool:
        """pyinfra's running, and a start queued at boot (agent/systemd.py state says why)."""
        return self.sub in RUNNING or self.queued

    @property
    def is_enabled(self) -> bool:
        return self.enabled in ENABLED


class UnitStates(FactBase[dict[str, UnitInfo]]):
    """LoadState, SubState, UnitFileState and NeedDaemonReload of each unit named, keyed by its
    Id (its full name: name units in full, "x.service", not by an alias; one that is not found
    still has its block, LoadState=not-found).

    host.get_fact(UnitStates, units=["sglang-pve-nvidia-nodes.service"])
    # {"sglang-pve-nvidia-nodes.service": UnitInfo(load="loaded", sub="exited", enabled="enabled")}
    """

    @staticmethod
    def default() -> dict[str, UnitInfo]:
        return {}

    def command(self, units):
        return f"systemctl show --property={_PROPERTIES} -- {' '.join(shlex.quote(u) for u in units)}"

    def process(self, output):
        return {
            block.get("Id", ""): UnitInfo(
                block.get("LoadState", ""),
                block.get("SubState", ""),
                block.get("UnitFileState", ""),
                block.get("NeedDaemonReload") == "yes",
                bool(block.get("Job")),
            )
            for block in systemd.parse_show(output)
        }
