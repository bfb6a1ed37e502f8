"""prestart and poststop: the GPUs are free before a server starts and after it stopped, verified.

prestart (ExecStartPre), in order:
0. The files the unit reads must be a release's, the current one's or a pending switch's, else it
   refuses (exit 3): no start from a mix of two releases (mixed.py).
1. Holders of /dev/nvidia* that are not ours, or belong to another toolkit unit that is running,
   make it refuse (exit 3): it names PIDs and command lines on stderr and in the server log and
   never touches them. Short-lived holders (an `nvidia-smi` call) are ignored: a holder must
   still be there after SETTLE_S. Another unit that is stopping (`Conflicts=` queues its stop
   beside this start) is waited for, within gpu_free_timeout_s.
2. Our stale holders (this unit's leftovers, or a stopped toolkit unit's) are killed by PID:
   SIGTERM, wait, SIGKILL, wait until gone (exit 4 if one survives, e.g. stuck in the driver).
3. Wait, within gpu_free_timeout_s, until every GPU's memory.used <= gpu_idle_mib (skipped where
   nvidia-smi is absent; exit 4 on timeout).
4. Sleep the restart backoff left after recent watchdog restarts (restarts.py).
5. Record the log size in state_dir/run/NAME.offset: the gate reads this start's lines from there.

poststop (ExecStopPost): within gpu_free_timeout_s, kill this unit's leftover holders by PID and
wait until none is left and memory is idle; exit 0 saying so, or exit 4 naming what still holds
the GPUs (a foreign holder with memory in use fails at once: waiting would not help).
"""

import time

from sglang_pve.agent import exitcodes, gpus, holders, logfollow, mixed, procs, restarts, state, stopping, systemd
from sglang_pve.agent.gpus import Gpu
from sglang_pve.agent.holders import Holder
from sglang_pve.agent.output import Say
from sglang_pve.agent.spec import Spec

KILL_GRACE_S = 10.0
KILL_WAIT_S = 10.0
SETTLE_S = 2.0
POLL_S = 1.0


def prestart(
    spec: Spec, say: Say, *, grace_s: float = KILL_GRACE_S, settle_s: float = SETTLE_S, poll_s: float = POLL_S
) -> int:
    refusal = mixed.why_not(spec)
    if refusal:
        say(refusal, error=True)
        state.update_status(spec, verdict="failed: its files are no release's (prestart refused)")
        return exitcodes.REFUSED
    deadline = time.monotonic() + spec.gpu_free_timeout_s
    waiting_for: set[str] = set()
    while True:
        stale, draining, blockers = _split(spec, _settled_scan(spec, settle_s))
        if draining and not blockers and time.monotonic() < deadline:
            units = {h.unit for h in draining if h.unit is not None}  # ours: each has its unit
            if units - waiting_for:  # Conflicts= runs the other unit's stop beside this start
                say(f"waiting up to {spec.gpu_free_timeout_s:g}s for {', '.join(sorted(units))} to stop")
                waiting_for |= units
            time.sleep(poll_s)
            continue
        blockers += [(h, "still stopping") for h in draining]
        break
    if blockers:
        lines = "\n".join(f"  {_why(h, reason)}" for h, reason in blockers)
        say(
            f"refusing to start {spec.unit}: /dev/nvidia* is held by processes that are not this unit's:\n"
            f"{lines}\nStop them first; the agent never kills processes that are not its own.",
            error=True,
        )
        state.update_status(spec, verdict="failed: GPUs held by other processes (prestart refused)")
        return exitcodes.REFUSED
    if stale:
        say(
            "killing stale processes of ours by PID (SIGTERM, then SIGKILL):\n"
            + "\n".join(f"  {h.describe()}" for h in stale)
        )
        survivors = procs.terminate([h.proc for h in stale], grace_s, KILL_WAIT_S)
        if survivors:
            say(
                f"cannot start {spec.unit}: PIDs {', '.join(str(p.pid) for p in survivors)} survived SIGKILL "
                "(probably stuck in the NVIDIA driver, state D); the GPUs stay held",
                error=True,
            )
            return exitcodes.GPUS_BUSY
    code = _wait_memory_idle(spec, say, deadline, poll_s, action=f"cannot start {spec.unit}")
    if code != exitcodes.OK:
        return code
    wait = restarts.backoff_left(spec)
    if wait > 0:
        count = len(restarts.in_window(spec))
        say(f"restart backoff: {count} watchdog restart(s) within {spec.watchdog.window_s:g}s, waiting {wait:.0f}s")
        time.sleep(wait)
    say(f"GPUs free; starting {spec.unit}")
    stopping.take(spec)  # a mark left by an earlier stop must not excuse this start's crash
    offset = logfollow.size(spec.log)
    state.write_offset(spec, offset)
    now = time.time()
    state.update_status(
        spec,
        phase="launch",
        phase_since=now,
        started=now,
        offset=offset,
        verdict="starting (launch)",
        diagnosis=None,
        watchdog={},
    )
    return exitcodes.OK


def poststop(
    spec: Spec, say: Say, *, grace_s: float = KILL_GRACE_S, settle_s: float = SETTLE_S, poll_s: float = POLL_S
) -> int:
    deadline = time.monotonic() + spec.gpu_free_timeout_s
    while True:
        found = _settled_scan(spec, settle_s)
        mine = [h for h in found if h.ours and h.unit == spec.unit]
        others = [h for h in found if h not in mine]
        left = deadline - time.monotonic()
        if mine and left > 0:
            say("killing leftover processes of this unit by PID:\n" + "\n".join(f"  {h.describe()}" for h in mine))
            procs.terminate([h.proc for h in mine], min(grace_s, left), min(KILL_WAIT_S, max(left - grace_s, 1.0)))
            continue
        busy, error = _busy(spec)
        if not mine and busy == []:
            note = " (memory not checked: nvidia-smi absent)" if error == "absent" else ""
            say(f"GPUs free: no process of {spec.unit} holds /dev/nvidia* and memory is idle{note}")
            _mark_stopped(spec, gpus_free=True)
            return exitcodes.OK
        if (not mine and others and busy) or left <= 0:
            say(f"GPUs NOT free after stopping {spec.unit}:\n" + _holding(mine, others, busy, error, spec), error=True)
            _mark_stopped(spec, gpus_free=False)
            return exitcodes.GPUS_BUSY
        time.sleep(min(poll_s, max(left, 0.01)))


def _settled_scan(spec: Spec, settle_s: float) -> list[Holder]:
    """Holders now; holders not of this unit only if they were there `settle_s` ago too."""
    first = holders.scan(spec.unit_prefix)
    if not any(not (h.ours and h.unit == spec.unit) for h in first) or settle_s <= 0:
        return first
    time.sleep(settle_s)
    seen = {(h.pid, h.start) for h in first}
    return [h for h in holders.scan(spec.unit_prefix) if (h.ours and h.unit == spec.unit) or (h.pid, h.start) in seen]


def _split(spec: Spec, found: list[Holder]) -> tuple[list[Holder], list[Holder], list[tuple[Holder, str]]]:
    """(stale holders of ours to kill, holders of another unit that is stopping,
    [(holder, why it blocks the start)])."""
    others = sorted({h.unit for h in found if h.ours and h.unit is not None and h.unit != spec.unit})
    try:
        states = {unit: props.get("ActiveState") for unit, props in systemd.show(others, ["ActiveState"]).items()}
    except systemd.SystemdError as error:
        states = dict.fromkeys(others, f"in an unknown state ({error})")
    stale: list[Holder] = []
    draining: list[Holder] = []
    blockers: list[tuple[Holder, str]] = []
    for holder in found:
        unit_state = states.get(holder.unit) if holder.unit is not None else None
        if not holder.ours:
            blockers.append((holder, "foreign"))
        elif holder.unit == spec.unit or unit_state in systemd.STOPPED:
            stale.append(holder)
        elif unit_state == "deactivating":
            draining.append(holder)
        else:
            blockers.append((holder, unit_state or "in an unknown state"))
    return stale, draining, blockers


def _why(holder: Holder, reason: str) -> str:
    if reason == "foreign":
        return (
            f"PID {holder.pid} (foreign: not started by an sglang-pve unit): {holder.cmdline or '?'} "
            f"[holds {', '.join(holder.devices)}]"
        )
    return f"{holder.describe()} -- unit {holder.unit} is {reason}; stop it: systemctl stop {holder.unit}"


def _busy(spec: Spec) -> tuple[list[Gpu] | None, str | None]:
    """(GPUs above gpu_idle_mib, error): ([], "absent") without nvidia-smi, (None, msg) on failure."""
    try:
        gpu_list = gpus.query_gpus()
    except gpus.GpuQueryError as error:
        return None, str(error)
    if gpu_list is None:
        return [], "absent"
    return gpus.busy(gpu_list, spec.gpu_idle_mib), None


def _wait_memory_idle(spec: Spec, say: Say, deadline: float, poll_s: float, action: str) -> int:
    told = False
    while True:
        busy, error = _busy(spec)
        if busy == []:
            if error == "absent":
                say("nvidia-smi absent: GPU memory not checked")
            return exitcodes.OK
        if time.monotonic() >= deadline:
            say(
                f"{action}: GPU memory still in use after {spec.gpu_free_timeout_s:g}s:\n"
                + _holding([], [], busy, error, spec),
                error=True,
            )
            return exitcodes.GPUS_BUSY
        if not told:
            say(
                f"waiting up to {spec.gpu_free_timeout_s:g}s for GPU memory to be released: "
                + (_memory(busy, spec) if busy else str(error))  # busy None: error says why
            )
            told = True
        time.sleep(min(poll_s, max(deadline - time.monotonic(), 0.01)))


def _holding(mine: list[Holder], others: list[Holder], busy: list[Gpu] | None, error: str | None, spec: Spec) -> str:
    lines = [f"  {h.describe()} (survived SIGKILL)" for h in mine]
    lines += [f"  {h.describe()}" for h in others]
    if busy:
        lines.append(f"  {_memory(busy, spec)}")
        if not mine and not others:
            lines.append(
                "  no process in this container holds /dev/nvidia*: check the Proxmox host "
                "(other containers, processes outside this PID namespace)"
            )
    elif busy is None:
        lines.append(f"  GPU memory unknown: {error}")
    return "\n".join(lines)


def _memory(busy: list[Gpu], spec: Spec) -> str:
    used = ", ".join(f"GPU {gpu.index} {gpu.memory_used_mib} MiB" for gpu in busy)
    return f"memory used above {spec.gpu_idle_mib:g} MiB: {used}"


def _mark_stopped(spec: Spec, gpus_free: bool) -> None:
    record = state.read_status(spec)
    verdict = record.get("verdict") or ""
    fields: dict[str, object] = {"gpus_free": gpus_free, "stopped": time.time()}
    if not verdict.startswith("failed"):
        fields["verdict"] = "stopped" if gpus_free else "failed: GPUs not free after stop"
    state.update_status(spec, **fields)
