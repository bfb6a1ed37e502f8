"""Failure diagnoses: one JSON file per event, `diagnoses_dir/NAME-<UTC time>-<kind>.json`.

Collected (bounded) when the gate fails the start (stall, deadline, crash), the watchdog finds
the server wedged (wedged, restart_cap), or either loses a TP group peer (peer_gone); written
atomically with mode 0640 after the action:

    {"server": "baseline", "unit": "sglang-baseline.service", "kind": "stall",
     "time": "2026-07-20T10:45:00Z", "phase": "cuda_graph", "seconds_in_phase": 1260.4,
     "seconds_stalled": 1200.2, "summary": "stalled in cuda_graph: no log progress for 1200s ...",
     "reason": null, "main_pid": 4242, "log": "/var/log/sglang/baseline.log",
     "log_tail": ["...last 50 lines..."],
     "gpus": [{"index": 0, "memory_used_mib": 80211, "utilization_pct": 0, ...}], "gpu_error": null,
     "holders": [{"pid": 4300, "cmdline": "sglang::scheduler_TP0", "ours": true, ...}],
     "py_spy": {"4300": "Thread 4300 (idle): \\"MainThread\\" ..."}}

`gpus` is null where nvidia-smi is absent; `py_spy` is null where py-spy is not on PATH, else
the `py-spy dump --pid P` output for the main PID and this unit's GPU holders.
"""

import os
import re
import shutil
import threading
import time
from dataclasses import asdict

from sglang_pve.agent import bounded, gpus, holders, logfollow, state
from sglang_pve.agent.spec import Spec
from sglang_pve.agent.state import Record

KINDS = ("stall", "deadline", "crash", "wedged", "restart_cap", "peer_gone")
PY_SPY_TIMEOUT_S = 30.0
TAIL_LINES = 50


def collect(
    spec: Spec,
    kind: str,
    summary: str,
    *,
    phase: str,
    seconds_in_phase: float,
    seconds_stalled: float,
    reason: str | None = None,
    main_pid: int | None = None,
) -> Record:
    """The evidence, in memory, within a hard bound (nvidia-smi and py-spy are bounded.run):
    callers collect it while the stuck processes still exist, act, and only then `save` it."""
    if kind not in KINDS:
        raise ValueError(f"diagnosis kind {kind!r} not in {KINDS}")
    now = time.time()
    record: Record = {
        "server": spec.server,
        "unit": spec.unit,
        "kind": kind,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "epoch": now,
        "phase": phase,
        "seconds_in_phase": round(seconds_in_phase, 1),
        "seconds_stalled": round(seconds_stalled, 1),
        "summary": summary,
        "reason": reason,
        "main_pid": main_pid,
        "log": spec.log,
        "log_tail": logfollow.tail(spec.log, TAIL_LINES),
    }
    record.update(evidence(spec, main_pid))
    return record


def save(spec: Spec, record: Record) -> str | None:
    """Write a collected diagnosis; best effort: None (not an exception) when the state
    directory is read-only or full, because the action it documents has been taken already."""
    path = _new_path(spec, record["kind"], record.pop("epoch", time.time()))
    try:
        state.write_json(path, record, mode=0o640)
    except OSError:
        return None
    return path


def evidence(spec: Spec, main_pid: int | None) -> Record:
    """GPU numbers, device holders and py-spy stacks, each part tolerant of failure."""
    try:
        gpu_list, gpu_error = gpus.query_gpus(), None
    except gpus.GpuQueryError as error:
        gpu_list, gpu_error = None, str(error)
    found = holders.scan(spec.unit_prefix)
    pids = {h.pid for h in found if h.ours and h.unit == spec.unit}
    if main_pid:
        pids.add(main_pid)
    return {
        "gpus": None if gpu_list is None else [asdict(gpu) for gpu in gpu_list],
        "gpu_error": gpu_error,
        "holders": [h.to_json() for h in found],
        "py_spy": dump_stacks(sorted(pids)),
    }


def dump_stacks(pids: list[int], timeout_s: float = PY_SPY_TIMEOUT_S) -> dict[str, str] | None:
    """`py-spy dump --pid P` for each PID, run in parallel, each bounded by `timeout_s`."""
    tool = shutil.which("py-spy")
    if tool is None:
        return None
    dumps: dict[str, str] = {}

    def dump(pid: int) -> None:
        try:
            done = bounded.run([tool, "dump", "--pid", str(pid)], timeout_s)
            dumps[str(pid)] = (done.stdout + done.stderr)[-65536:]
        except (OSError, bounded.Timeout) as error:
            dumps[str(pid)] = str(error)

    threads = [threading.Thread(target=dump, args=(pid,), daemon=True) for pid in pids]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s + 1
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return dumps


def latest(spec: Spec) -> str | None:
    """The newest diagnosis of this server (by the time in its name), or None."""
    pattern = re.compile(rf"^{re.escape(spec.server)}-(\d{{8}}T\d{{6}}Z)(?:-(\d+))?-(?:{'|'.join(KINDS)})\.json$")
    try:
        names = os.listdir(spec.diagnoses_dir)
    except OSError:
        return None
    dated = [(m.group(1), int(m.group(2) or 0), name) for name in names if (m := pattern.match(name))]
    return f"{spec.diagnoses_dir}/{max(dated)[2]}" if dated else None


def _new_path(spec: Spec, kind: str, now: float) -> str:
    """A name no other diagnosis of this server has in the same second (whatever its kind)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    try:
        names = os.listdir(spec.diagnoses_dir)
    except OSError:
        names = []
    unique, counter = stamp, 1
    while any(name.startswith(f"{spec.server}-{unique}-") for name in names):
        counter += 1
        unique = f"{stamp}-{counter}"
    return f"{spec.diagnoses_dir}/{spec.server}-{unique}-{kind}.json"
