"""A restart the toolkit owes a container, recorded on its node before the change that needs it and
cleared only after the start/reboot task ended OK: a run killed in between, or a failed reboot,
leaves the record, and the next run restarts the container and says why, even when Proxmox shows
nothing pending (hostname and raw lxc lines are written at once and act only at start).

One small JSON file per container on the node, carrying the toolkit's marker:

    /var/lib/sglang-pve/restart-owed/129.json
    {"keys": ["hostname", "lxc"], "marker": "Managed by sglang-pve", "since": "2026-12-01T14:02:11Z", "vmid": 129}
"""

import json
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone

from pyinfra.api import FactBase, QuoteString, StringCommand

from sglang_pve.agent.contract import MARKER, STATE_DIR

DEBT_DIR = f"{STATE_DIR}/restart-owed"  # on the node


@dataclass(frozen=True)
class Debt:
    since: str  # UTC, ISO 8601 (when the first change that needs the restart was about to be written)
    keys: tuple[str, ...]

    def line(self) -> str:
        """restart owed since 2026-12-01T14:02:11Z: hostname, lxc"""
        return f"restart owed since {self.since}: {', '.join(self.keys)}"

    def adding(self, keys: list[str]) -> "Debt":
        return Debt(self.since, tuple(sorted(set(self.keys) | set(keys))))


def owed(keys: list[str], before: "Debt | None") -> Debt:
    """The debt to record before writing changes that need a restart: the older one grown."""
    fresh = Debt(datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), ())
    return (before or fresh).adding(keys)


def debt_path(directory: str, vmid: int) -> str:
    return f"{directory}/{vmid}.json"


class RestartDebts(FactBase[dict[int, Debt]]):
    """Every restart owed on this node, {vmid: Debt}, in one command for all its containers (a
    no-change run reads the node once, not once per container). A file without the toolkit's
    marker, or not JSON, is not a debt of ours; the vmid is the file's name.

    host.get_fact(RestartDebts, directory="/var/lib/sglang-pve/restart-owed")
    # {129: Debt(since="2026-12-01T14:02:11Z", keys=("hostname", "lxc"))}
    """

    @staticmethod
    def default() -> dict[int, Debt]:
        return {}  # no output (nothing owed): pyinfra does not call process()

    def command(self, directory: str) -> str:
        return f"grep -H '' {shlex.quote(directory)}/*.json 2>/dev/null || true"

    def process(self, output) -> dict[int, Debt]:
        debts = {}
        for line in output:
            path, found, text = line.partition(".json:")
            name = path.rsplit("/", 1)[-1]
            if not found or not name.isdigit():
                continue
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("marker") == MARKER:
                debts[int(name)] = Debt(str(record.get("since", "?")), tuple(str(k) for k in record.get("keys", [])))
        return debts


def record_command(directory: str, vmid: int, debt: Debt) -> StringCommand:
    """Write the record atomically (a temp file renamed over it), root-only."""
    path = debt_path(directory, vmid)
    body = json.dumps({"keys": list(debt.keys), "marker": MARKER, "since": debt.since, "vmid": vmid}, sort_keys=True)
    temp, final = shlex.quote(path + ".tmp"), shlex.quote(path)
    script = (
        f"umask 077 && mkdir -p {shlex.quote(directory)} && printf '%s\\n' {shlex.quote(body)} > {temp}"
        f" && mv -f {temp} {final}"
    )
    return StringCommand("sh", "-c", QuoteString(script))


def clear_command(directory: str, vmid: int) -> StringCommand:
    """Remove the record, only when it carries the marker (the toolkit removes only its own files)."""
    path = shlex.quote(debt_path(directory, vmid))
    script = f"if grep -qF {shlex.quote(MARKER)} {path} 2>/dev/null; then rm -f {path}; fi"
    return StringCommand("sh", "-c", QuoteString(script))
