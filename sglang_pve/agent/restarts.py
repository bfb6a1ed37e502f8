"""The watchdog's restart history (state_dir/restarts/NAME.json) and the restart policy.

    {"server": "baseline", "restarts": [1784541600.0, 1784542500.5]}   (epoch seconds)

At most `watchdog.max_restarts` restarts within `watchdog.window_s`; the start after the k-th
restart in the window waits `backoff_s * 2**(k-1)`, capped at `backoff_max_s`, counted from that
restart (a start long after it does not wait at all).
"""

import time

from sglang_pve.agent import state
from sglang_pve.agent.spec import Spec


def history(spec: Spec) -> list:
    record = state.read_json(spec.state_file("restarts")) or {}
    return sorted(float(t) for t in record.get("restarts", []) if isinstance(t, (int, float)))


def in_window(spec: Spec, now: float | None = None) -> list:
    now = time.time() if now is None else now
    return [t for t in history(spec) if now - spec.watchdog.window_s <= t <= now]


def record(spec: Spec, now: float | None = None) -> list:
    """Add a restart at `now`; keep only the window's restarts. Returns the window's restarts."""
    now = time.time() if now is None else now
    kept = in_window(spec, now) + [now]
    state.write_json(spec.state_file("restarts"), {"server": spec.server, "restarts": kept})
    return kept


def may_restart(spec: Spec, now: float | None = None) -> bool:
    return len(in_window(spec, now)) < spec.watchdog.max_restarts


def backoff_left(spec: Spec, now: float | None = None) -> float:
    """Seconds a start must still wait because of recent watchdog restarts (0: none)."""
    now = time.time() if now is None else now
    recent = in_window(spec, now)
    if not recent:
        return 0.0
    wait = min(spec.watchdog.backoff_s * 2 ** (len(recent) - 1), spec.watchdog.backoff_max_s)
    return max(0.0, wait - (now - recent[-1]))
