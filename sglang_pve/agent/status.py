"""`status --json`: every server configuration of this host in one JSON document.

One command for the pyinfra status fact: one systemctl call for all units, one nvidia-smi call,
one /proc scan, and per server a look at its log, state files and (if the port listens) /health.

    {"time": "2026-07-20T10:00:00Z", "host": "gpu1", "spec_dir": "/etc/sglang/servers",
     "driver": "580.95.05", "device_majors": {"nvidia": 195, "nvidia-uvm": 510, ...},
     "device_nodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0}, ...],
     "gpus": [{"index": 0, "memory_used_mib": 80211, ...}] | null,
     "gpu_error": null, "holders": [{"pid": 4300, "cmdline": "...", "ours": true, ...}],
     "unit_error": null,
     "servers": [{"server": "baseline", "unit": "sglang-baseline.service",
                  "spec": "/etc/sglang/servers/baseline.lifecycle.json", "log": "/var/log/sglang/baseline.log",
                  "state": {"ActiveState": "active", "SubState": "running", "Result": "success",
                            "NRestarts": "0", "MainPID": "4242", ...},
                  "phase": "ready", "seconds_in_phase": 3600.0, "seconds_since_progress": 2.1,
                  "health": {"status": 200, "error": null, "seconds": 0.9} | null,
                  "last_log_line": "...",
                  "restarts": {"in_window": 0, "total": 0, "max": 3, "window_s": 3600, "last": null,
                               "on_crash": "restart (cap 3 within 3600s)", "crash_restart_at": null},
                  "diagnosis": "/var/lib/sglang-pve/diagnoses/baseline-20260720T081500Z-stall.json" | null,
                  "group": {"name": "kimi", "rank": 1, "nnodes": 2} | null, "verdict": "ready"}]}

Verdicts: `ready` (the gate passed: systemd's unit may still be activating for the moment the
gate takes to exit); `starting (<phase>, Ns)` (phase `prestart`, a phases.PHASES name below ready,
or `gate`: the ready line was seen, the gate's /health 200 not yet); `stalled (<phase>, no progress for Ns)` (silent
longer than the phase's stall timeout; the gate is about to fail it); `zombie since <ISO time>`
(active but /health failing and the log silent, or the port closed); `restarting in Ns:
crashed after ready: <why>` (failed by a crash, its start scheduled by the crash policy,
crashes.py); `failed: <why>` (the latest diagnosis of this start, else the unit's Result);
`stopping`; `stopped`. `restarts` counts the restarts of the current release within the window
(the watchdog's and the crash policy's together) against the cap. A spec that does
not load is listed as {"spec": path, "error": message}.
"""

import glob
import os
import socket
import time
from dataclasses import asdict

from sglang_pve.agent import (
    contract,
    crashes,
    diagnosis,
    gpus,
    health,
    holders,
    logfollow,
    output,
    phases,
    restarts,
    state,
    systemd,
)
from sglang_pve.agent.spec import Spec, SpecError, load
from sglang_pve.agent.state import Record

UNIT_PROPERTIES = [
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "MainPID",
    "ExecMainStartTimestamp",
    "ExecMainStartTimestampMonotonic",
    "ActiveEnterTimestampMonotonic",
    "InactiveExitTimestampMonotonic",
    "Job",
]
HEALTH_TIMEOUT_S = 5.0
PHASE_READ_MAX = 64 << 20


def collect(spec_dir: str) -> Record:
    specs: list[Spec] = []
    broken: list[Record] = []
    for path in sorted(glob.glob(os.path.join(spec_dir, "*.lifecycle.json"))):
        try:
            specs.append(load(path))
        except SpecError as error:
            broken.append({"spec": path, "error": str(error)})
    try:
        timers = [f"{crashes.timer_name(s)}.timer" for s in specs]  # a crash restart pending
        units, unit_error = systemd.show([s.unit for s in specs] + timers, UNIT_PROPERTIES), None
    except systemd.SystemdError as error:
        units, unit_error = {}, str(error)
    try:
        gpu_list, gpu_error = gpus.query_gpus(), None
    except gpus.GpuQueryError as error:
        gpu_list, gpu_error = None, str(error)
    prefix = specs[0].unit_prefix if specs else contract.UNIT_PREFIX
    return {
        "time": _iso(time.time()),
        "host": socket.gethostname(),
        "spec_dir": spec_dir,
        "driver": gpus.driver_version(),
        "device_majors": gpus.device_majors(),
        "device_nodes": [asdict(node) for node in gpus.device_nodes()],
        "gpus": None if gpu_list is None else [asdict(gpu) for gpu in gpu_list],
        "gpu_error": gpu_error,
        "holders": [h.to_json() for h in holders.scan(prefix)],
        "unit_error": unit_error,
        "servers": [server(s, units.get(s.unit), units.get(f"{crashes.timer_name(s)}.timer")) for s in specs] + broken,
    }


def server(spec: Spec, unit: dict[str, str] | None, timer: dict[str, str] | None = None) -> Record:
    """`timer`: the unit's NAME.crash-restart.timer (crashes.py), while one is loaded."""
    now = time.time()
    unit = unit or {}
    active, sub = unit.get("ActiveState"), unit.get("SubState")
    record = state.read_status(spec)
    entry: Record = {
        "server": spec.server,
        "unit": spec.unit,
        "spec": spec.path,
        "log": spec.log,
        "state": {key: unit[key] for key in ["Id", *UNIT_PROPERTIES] if key in unit} or None,
        "phase": None,
        "seconds_in_phase": None,
        "seconds_since_progress": None,
        "health": None,
        "last_log_line": next((t for t in reversed(logfollow.tail(spec.log, 50)) if not output.is_own(t)), None),
        "restarts": _restarts(spec, record, (timer or {}).get("ActiveState") in systemd.RUNNING),
        "diagnosis": diagnosis.latest(spec),
        # a TP group member: its rank, so every rank's phase reads side by side across the hosts
        "group": {"name": spec.group.name, "rank": spec.group.rank, "nnodes": spec.group.nnodes}
        if spec.group
        else None,
    }
    started = _epoch(unit.get("ExecMainStartTimestampMonotonic"), now)
    if active in systemd.HOLDING and health.listening(spec.host, spec.port):
        result = health.get(spec.host, spec.port, "/health", HEALTH_TIMEOUT_S)
        entry["health"] = {"status": result.status, "error": result.error, "seconds": round(result.seconds, 3)}
    if active == "activating" and sub == "start-pre":
        since = _epoch(unit.get("InactiveExitTimestampMonotonic"), now) or now
        entry.update(phase="prestart", seconds_in_phase=round(now - since, 1))
        entry["verdict"] = f"starting (prestart, {now - since:.0f}s)"
    elif active in ("activating", "failed"):
        tracker = _phase_from_log(spec)
        since = tracker.since or started or now
        silent = now - max(_last_activity(spec) or 0, started or 0)  # probe lines are no progress
        entry.update(
            phase=tracker.phase, seconds_in_phase=round(now - since, 1), seconds_since_progress=round(silent, 1)
        )
        restart_at = entry["restarts"]["crash_restart_at"]
        if active == "failed" and restart_at is not None:
            left = max(0.0, record["crash"]["restart_at"] - now)
            entry["verdict"] = f"restarting in {left:.0f}s: {record['crash']['summary']}"
        elif active == "failed":
            entry["verdict"] = f"failed: {_failure(spec, unit, record, entry['diagnosis'], started)}"
        elif _gate_failed(record, started):
            # the gate decided this start failed and is ending it (the kill, the diagnosis): its word,
            # not the dying server's last lines, which would read as progress (`starting`)
            entry["verdict"] = record["verdict"]
        elif tracker.ready and _gate_passed(record, started):
            # the gate saw /health answer 200 and said so; systemd calls the unit active once the gate exits
            entry.update(phase="ready", seconds_in_phase=round(now - record["ready_at"], 1), verdict="ready")
        elif tracker.ready:
            # the ready line, but not yet the gate's /health 200 (a TP rank above 0: rank 0's too): phase
            # ready is the gate's word, else one line reads `ready 2 s, starting (ready, 2s)`
            entry["phase"] = phases.GATE
            entry["verdict"] = (
                f"stalled ({phases.GATE}, no progress for {silent:.0f}s)"
                if silent > spec.stall_timeout(tracker.phase)
                else f"starting ({phases.GATE}: ready line seen, /health not confirmed yet, {now - since:.0f}s)"
            )
        elif silent > spec.stall_timeout(tracker.phase):
            entry["verdict"] = f"stalled ({tracker.phase}, no progress for {silent:.0f}s)"
        else:
            entry["verdict"] = f"starting ({tracker.phase}, {now - since:.0f}s)"
    elif active in ("active", "reloading"):
        ready_at = record.get("ready_at") or _epoch(unit.get("ActiveEnterTimestampMonotonic"), now) or now
        activity = _last_activity(spec)
        entry.update(
            phase="ready",
            seconds_in_phase=round(now - ready_at, 1),
            seconds_since_progress=None if activity is None else round(now - activity, 1),
        )
        healthy = entry["health"] is not None and entry["health"]["status"] == 200
        busy = activity is not None and now - activity < spec.watchdog.interval_s
        if healthy or busy:
            entry["verdict"] = "ready"
        else:
            failing_since = (record.get("watchdog") or {}).get("failing_since")
            entry["verdict"] = f"zombie since {_iso(failing_since or activity or ready_at)}"
    elif active == "deactivating":
        entry["verdict"] = "stopping"
    elif systemd.state(unit) == "activating":  # its start queued: at boot, waiting for its After= units
        entry["verdict"] = f"start queued (job {unit['Job']}, waiting for the units it starts after)"
    else:
        entry["verdict"] = "stopped"
    return entry


def _gate_passed(record: Record, started: float | None) -> bool:
    """The gate recorded this start ready (gate.py _succeed: verdict and ready_at, before it starts the
    watchdog and exits)."""
    ready_at = record.get("ready_at")
    return record.get("verdict") == "ready" and isinstance(ready_at, (int, float)) and ready_at >= (started or 0) - 1


def _gate_failed(record: Record, started: float | None) -> bool:
    """The gate failed this start (gate.py _fail: verdict and failed_at, before its kill)."""
    failed_at = record.get("failed_at")
    verdict = record.get("verdict")
    return (
        isinstance(verdict, str)
        and verdict.startswith("failed: ")
        and isinstance(failed_at, (int, float))
        and failed_at >= (started or 0) - 1
    )


def _failure(spec: Spec, unit: dict[str, str], record: Record, latest: str | None, started: float | None) -> str:
    """Why the unit failed, newest first: the agent's verdict (gate, watchdog, prestart), this
    start's diagnosis, else systemd's Result with the last exception line of the log."""

    def this_start(epoch: float) -> bool:
        return started is None or epoch >= started - 1

    verdict = record.get("verdict") or ""
    if verdict.startswith("failed: ") and this_start(record.get("updated", 0)):
        return verdict[len("failed: ") :]
    if latest and this_start(os.path.getmtime(latest)):
        summary: str | None = (state.read_json(latest) or {}).get("summary")
        if summary:
            return summary
    why = f"unit result {unit.get('Result') or 'unknown'}"
    errors = [line for line in logfollow.tail(spec.log, 50) if phases.is_exception(phases.parse_line(line))]
    return f"{why}; log: {errors[-1].strip()}" if errors else why


def _phase_from_log(spec: Spec) -> phases.PhaseTracker:
    """The phase tracker fed with this start's lines (from the recorded offset)."""
    tracker = phases.PhaseTracker(spec.speculative)
    offset = state.read_offset(spec) or 0
    follower = logfollow.LogFollower(spec.log, offset)
    while follower.offset < offset + PHASE_READ_MAX:
        update = follower.poll()
        if not update.grew:
            break
        for line in update.lines:
            if not output.is_own(line):
                tracker.feed(line)
    return tracker


def _last_activity(spec: Spec) -> float | None:
    """Time of the server's last real output: the newest stamped line that is neither ours nor
    probe noise (the log's mtime when that line has no stamp)."""
    for text in reversed(logfollow.tail(spec.log, 200)):
        if not phases.is_progress(text):
            continue
        stamp = phases.parse_line(text).stamp
        if stamp is not None:
            return stamp
        try:
            return os.stat(spec.log).st_mtime
        except OSError:
            return None
    return None


def _restarts(spec: Spec, record: Record, timer_waits: bool) -> dict[str, object]:
    """The restart count of the current release in the window, the cap, the crash policy and,
    while its timer waits, when the crash restart comes (a stopped timer: none comes)."""
    at = restarts.now()
    recent = restarts.in_window(spec, at)
    last = at.time - restarts.age(recent[-1], at) if recent else None
    restart_at = (record.get("crash") or {}).get("restart_at") if timer_waits else None
    return {
        "in_window": len(recent),
        "total": restarts.total(spec),
        "max": spec.watchdog.max_restarts,
        "window_s": spec.watchdog.window_s,
        "last": None if last is None else _iso(last),
        "on_crash": crashes.policy(spec),
        "crash_restart_at": None if restart_at is None else _iso(restart_at),
    }


def _epoch(monotonic_usec: str | None, now: float) -> float | None:
    """systemd's CLOCK_MONOTONIC microseconds -> epoch seconds (None for 0/unset)."""
    if not monotonic_usec or not monotonic_usec.isdigit() or int(monotonic_usec) == 0:
        return None
    return now - (time.monotonic() - int(monotonic_usec) / 1e6)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def render(report: Record) -> str:
    """The human-readable table of `status` without --json."""
    rows = [f"{'SERVER':<20} {'UNIT':<34} VERDICT"]
    for entry in report["servers"]:
        rows.append(
            f"{entry.get('server', '?'):<20} {entry.get('unit', entry['spec']):<34} "
            f"{entry.get('verdict') or 'invalid spec: ' + entry.get('error', '')}"
        )
    if report["gpus"] is not None:
        used = ", ".join(f"{g['index']}:{g['memory_used_mib']}MiB/{g['utilization_pct']}%" for g in report["gpus"])
        rows.append(f"GPUs: {used or 'none'}")
    return "\n".join(rows)
