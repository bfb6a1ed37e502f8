"""The restart history (state_dir/restarts/NAME.json) and the restart policy: the watchdog's
restarts of a wedged server and crashes.py's of a crashed one, counted together.

    {"server": "baseline", "release": "20261130T114354Z-3f2a9c1d", "total": 7,
     "restarts": [{"boot": "5b1f...", "monotonic": 81234.5, "time": 1784541600.0}]}

The history belongs to the release that was current when it was written: a new release (the fix
deployed) starts with none, so its first wedge or crash does not meet the old release's cap.

Ages are measured on CLOCK_MONOTONIC within one boot (the boot id tells), so a wall clock stepped
back (NTP, an operator's `date -s`) can neither hide a restart from the cap nor skip a backoff;
a restart of an earlier boot is at least as old as this boot's uptime. `time` (epoch) is kept
for people and for entries of earlier boots.

At most `watchdog.max_restarts` restarts within `watchdog.window_s`; the start after the k-th
restart in the window waits `backoff_s * 2**(k-1)`, capped at `backoff_max_s`, counted from that
restart (a start long after it does not wait at all).
"""

import time
from dataclasses import asdict, dataclass

from sglang_pve.agent import overrides, state
from sglang_pve.agent.release_store import Store
from sglang_pve.agent.spec import Spec


@dataclass(frozen=True)
class Moment:
    boot: str  # /proc/sys/kernel/random/boot_id
    monotonic: float  # CLOCK_MONOTONIC seconds (system-wide, from boot)
    time: float  # epoch seconds, for display and across boots


def now() -> Moment:
    try:
        with open(f"{overrides.proc_root()}/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
    except OSError:
        boot = ""
    return Moment(boot, time.monotonic(), time.time())


def age(entry: Moment, at: Moment) -> float:
    if entry.boot and entry.boot == at.boot:
        return at.monotonic - entry.monotonic
    return max(at.time - entry.time, at.monotonic)  # before this boot: at least the uptime


def _release() -> str | None:
    return Store(overrides.releases_dir()).current_id()


def history(spec: Spec) -> list[Moment]:
    record = state.read_json(spec.state_file("restarts")) or {}
    if record.get("release") != _release():
        return []  # another release's restarts
    entries = []
    for item in record.get("restarts", []):
        if isinstance(item, dict):
            try:
                entries.append(Moment(str(item["boot"]), float(item["monotonic"]), float(item["time"])))
            except (KeyError, TypeError, ValueError):
                continue
        elif isinstance(item, (int, float)):  # an epoch-only entry of an older agent
            entries.append(Moment("", 0.0, float(item)))
    return entries


def total(spec: Spec) -> int:
    """Every restart of the current release (the history keeps only the window's): a counter."""
    record = state.read_json(spec.state_file("restarts")) or {}
    if record.get("release") != _release():
        return 0
    counted = record.get("total")
    return counted if isinstance(counted, int) else len(record.get("restarts", []))


def in_window(spec: Spec, at: Moment | None = None) -> list[Moment]:
    """This window's restarts, oldest first."""
    at = at or now()
    recent = [entry for entry in history(spec) if age(entry, at) <= spec.watchdog.window_s]
    return sorted(recent, key=lambda entry: -age(entry, at))


def record(spec: Spec, at: Moment | None = None) -> list[Moment]:
    """Add a restart at `at`; keep only the window's restarts. Returns the window's restarts.
    Raises OSError when the state directory is not writable (the caller acted already)."""
    at = at or now()
    kept = in_window(spec, at) + [at]
    restarts = [asdict(m) for m in kept]
    document = {"server": spec.server, "release": _release(), "total": total(spec) + 1, "restarts": restarts}
    state.write_json(spec.state_file("restarts"), document)
    return kept


def may_restart(spec: Spec, at: Moment | None = None) -> bool:
    return len(in_window(spec, at)) < spec.watchdog.max_restarts


def backoff(spec: Spec, k: int) -> float:
    """The wait before the start after the k-th restart in the window (k >= 1)."""
    wait: float = min(spec.watchdog.backoff_s * 2 ** (k - 1), spec.watchdog.backoff_max_s)
    return wait


def backoff_left(spec: Spec, at: Moment | None = None) -> float:
    """Seconds a start must still wait because of recent restarts (0: none)."""
    at = at or now()
    recent = in_window(spec, at)
    if not recent:
        return 0.0
    return max(0.0, backoff(spec, len(recent)) - age(recent[-1], at))
