"""The readiness gate (ExecStartPost): the unit becomes active only when SGLang is really ready.

It follows the server log from the offset prestart recorded, tracking the startup phase and the
time of the last progress (any new byte that is not the agent's own line), and polls every
POLL_S. Outcomes:

- ready: `The server is fired up and ready to roll!` was seen AND GET /health answered 200 ->
  start the watchdog (detached, same cgroup, output to the server log) and exit 0;
- stall: no progress for stall_timeout_s[phase] (before the first line: dist_init's; after the
  ready line, while /health is not 200 yet: warmup's) -> exit 5; access lines and probe noise
  are not progress (phases.is_progress);
- deadline: startup_timeout_s since the gate started -> exit 6;
- crash: one of SGLang's fatal lines or the main PID gone, for FATAL_GRACE_S (the rest of the
  traceback is read meanwhile; a stop's SIGTERM arriving then makes it a stop) -> exit 7, the
  diagnosis names the propagated exception (e.g. the context-length ValueError); a handled
  traceback is no crash;
- peer gone (a TP group member, spec.group): a rank this one depends on lost its connection to
  the dist-init port (peers.py: rank 0 watches every rank, the others rank 0) -> exit 12; a
  stall or crash on one rank thus fails every rank (the others cannot go on without it);
- SIGTERM: the unit is being stopped -> the stop is marked (stopping.py), exit 0.

While it waits it writes the host's metrics (metrics.py) every metrics.INTERVAL_S, and once more when
it fails a start (before the kill), so Prometheus sees a long start's phase and a hang before any revert.

Ranks above 0 of a TP group run no HTTP server of their own: they are ready at SGLang's
`Dummy health check server started` line and GET /health 200 on it (phases.py), once rank 0's
own /health (at its address and port) answers 200 too: the group is ready as one.

A failure collects its diagnosis (bounded), SIGKILLs the main PID on a stall, deadline or peer
loss (no drain for a server that never served), then writes the diagnosis and the status verdict, best
effort. A non-zero exit makes systemd fail the unit and kill its whole cgroup. Phase changes:

    [2026-07-20 10:05:12 sglang-pve gate] phase weights -> kv_cache after 301s in weights (312s since start)
"""

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from sglang_pve.agent import (
    diagnosis,
    exitcodes,
    health,
    logfollow,
    metrics,
    output,
    peers,
    phases,
    procs,
    state,
    stopping,
    watchdog,
)
from sglang_pve.agent.output import Say
from sglang_pve.agent.phases import PhaseTracker
from sglang_pve.agent.spec import Spec

POLL_S = 0.5
FATAL_GRACE_S = 2.0
HEALTH_TIMEOUT_S = 5.0
OnReady = Callable[[Spec, int | None], int]  # starts the watchdog; its PID
# What signal.signal takes and returns (typeshed's signal._HANDLER)
_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class _Terminated(Exception):
    pass


def run(
    spec: Spec,
    main_pid: int | None,
    say: Say,
    *,
    poll_s: float = POLL_S,
    fatal_grace_s: float = FATAL_GRACE_S,
    on_ready: OnReady | None = None,
) -> int:
    """Gate one start; `on_ready(spec, main_pid) -> pid` starts the watchdog (default)."""
    gate = _Gate(spec, main_pid, say)
    previous = _set_sigterm(_terminated)
    try:
        return gate.loop(poll_s, fatal_grace_s, on_ready or watchdog.launch)
    except _Terminated:
        return gate.terminated()
    finally:
        _set_sigterm(previous)


def _terminated(signum: int, frame: FrameType | None) -> NoReturn:
    _ignore_sigterm()
    raise _Terminated()


def _ignore_sigterm() -> None:
    _set_sigterm(signal.SIG_IGN)


def _set_sigterm(handler: _Handler) -> _Handler:
    """Install a SIGTERM handler where Python allows it (the main thread); return the old one."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


class _Gate:
    def __init__(self, spec: Spec, main_pid: int | None, say: Say):
        self.spec, self.say, self.main_pid = spec, say, main_pid
        offset = state.read_offset(spec)
        if offset is None:
            offset = logfollow.size(spec.log)
            say(
                f"no offset recorded by prestart in {spec.state_file('run', '.offset')}; "
                f"following {spec.log} from its end"
            )
        self.follower = logfollow.LogFollower(spec.log, offset, logfollow.main_output(main_pid))
        self.tracker = PhaseTracker(spec.speculative)
        self.main = (procs.identify(main_pid) or procs.Proc(main_pid, None)) if main_pid else None
        self.start = self.last_progress = self.phase_start = time.monotonic()
        self.phase_seconds: dict[str, float] = {}  # startup time per phase, in the status record
        self.last_line: str | None = None
        self.health: health.Result | None = None
        self.peers = peers.PeerWatch(spec.group) if spec.group else None
        self.gone: list[int] = []
        self.waiting_for_rank0 = False
        # the host's metrics every metrics.INTERVAL_S (a revert's start, seconds long, keeps the failed
        # start's file until its switch ends), and at a failure
        self.metrics_due = self.start + metrics.INTERVAL_S
        self.metrics_said: str | None = None

    def loop(self, poll_s: float, fatal_grace_s: float, on_ready: OnReady) -> int:
        spec = self.spec
        self.say(
            f"waiting for {spec.unit} to be ready: deadline {spec.startup_timeout_s:g}s, "
            f"main PID {self.main_pid or '?'}, log {spec.log}"
        )
        fatal_at = None
        while True:
            self._read()
            now = time.monotonic()
            main_alive = self.main is None or procs.alive(self.main)
            if (self.tracker.fatal or not main_alive) and fatal_at is None:
                fatal_at = now  # the rest of the traceback follows; or the SIGTERM of a stop
            if fatal_at is not None and now - fatal_at >= fatal_grace_s:
                self._read()  # the last words
                return self._fail("crash", main_alive)
            if self.peers is not None and fatal_at is None:
                self.gone = self.peers.gone()
                if self.gone:
                    return self._fail("peer_gone")
            if main_alive and self.tracker.ready:
                self.health = health.get(spec.host, spec.port, "/health", HEALTH_TIMEOUT_S)
                if self.health.ok and self._group_ready():
                    return self._succeed(on_ready)
            now = time.monotonic()
            if now - self.last_progress > spec.stall_timeout(self.tracker.phase):
                return self._fail("stall")
            if now - self.start > spec.startup_timeout_s:
                return self._fail("deadline")
            if now >= self.metrics_due:
                self.metrics_due = now + metrics.INTERVAL_S
                self._export()
            time.sleep(poll_s)

    def _export(self) -> None:
        """The host's metrics (metrics.py) with this start's phase, as the watchdog writes them after
        ready: a cold start of 30-90 min and a hang show in Prometheus while the switch waits."""
        unwritten = metrics.export(os.path.dirname(self.spec.path))
        if unwritten and unwritten != self.metrics_said:
            self.say(unwritten, error=True)
        self.metrics_said = unwritten

    def _group_ready(self) -> bool:
        """A rank above 0 is ready when rank 0 is (its /health at its address answers 200): a
        switch of the group then succeeds or fails on every rank alike, and a rank 0 that fails
        after the others' ready lines fails them too (they see it gone) instead of leaving them
        current on a release whose rank 0 went back to the previous one."""
        group = self.spec.group
        if group is None or group.rank == 0:
            return True
        rank0 = health.get(group.addresses[0], group.rank0_port, "/health", HEALTH_TIMEOUT_S)
        if not rank0.ok and not self.waiting_for_rank0:
            self.say(f"ready here; waiting for rank 0 ({group.addresses[0]}:{group.rank0_port}) to answer /health")
        self.waiting_for_rank0 = not rank0.ok
        return rank0.ok

    def terminated(self) -> int:
        """SIGTERM reaches the gate only from systemd stopping the unit (it signals the whole
        cgroup at once, so the main process may be gone already): a stop, never a crash."""
        stopping.mark(self.spec)
        self.say(f"stopped by SIGTERM in phase {self.tracker.phase} after {time.monotonic() - self.start:.0f}s")
        state.update_status(self.spec, verdict="stopped during startup")
        return exitcodes.OK  # a non-zero ExecStartPost would mark the requested stop "failed"

    def _read(self) -> None:
        update = self.follower.poll()
        progressed = update.partial_grew
        for line in update.lines:
            if output.is_own(line):
                continue
            if phases.is_progress(line):
                # Access lines (our own /health probe after the ready line, `status`, Prometheus,
                # any client) are no progress: else polling a hung warm-up hides the stall forever.
                progressed = True
                self.last_line = logfollow.redact(line)
            old = self.tracker.phase
            new = self.tracker.feed(line)
            if new:
                now = time.monotonic()
                self.say(
                    f"phase {old} -> {new} after {now - self.phase_start:.0f}s in {old} "
                    f"({now - self.start:.0f}s since start)"
                )
                self.phase_seconds[old] = round(now - self.phase_start, 3)
                self.phase_start = now
                state.update_status(
                    self.spec,
                    phase=new,
                    phase_since=time.time(),
                    verdict=f"starting ({new})",
                    startup_phases=self.phase_seconds,
                )
        if progressed:
            self.last_progress = time.monotonic()

    def _succeed(self, on_ready: OnReady) -> int:
        elapsed = time.monotonic() - self.start
        now = time.time()
        state.update_status(
            self.spec,
            phase="ready",
            phase_since=now,
            ready_at=now,
            verdict="ready",
            watchdog={"failures": 0, "failing_since": None},
            startup_phases=self.phase_seconds,
            startup_s=round(elapsed, 3),
        )
        pid = on_ready(self.spec, self.main_pid)
        group = self.spec.group
        seen = "'fired up'" if group is None or group.rank == 0 else f"rank {group.rank}'s dummy health server line"
        self.say(f"ready after {elapsed:.0f}s: {seen} seen and /health answered 200; watchdog PID {pid}")
        return exitcodes.OK

    def _fail(self, kind: str, main_alive: bool = True) -> int:
        _ignore_sigterm()  # a stop arriving now must not cut the diagnosis short
        spec, phase = self.spec, self.tracker.phase
        now, decided = time.monotonic(), time.time()
        stalled, in_phase, elapsed = now - self.last_progress, now - self.phase_start, now - self.start
        reason = self.tracker.reason
        if kind == "stall":
            limit = spec.stall_timeout(phase)
            summary = (
                f"stalled in {phase}: no log progress for {stalled:.0f}s (limit {limit:g}s), {elapsed:.0f}s after start"
            )
            if self.tracker.ready and self.health is not None:
                summary += f"; the ready line was seen but /health failed: {self.health.describe()}"
            elif self.last_line:
                summary += f"; last line: {self.last_line.strip()[:160]}"
            code = exitcodes.STALL
        elif kind == "peer_gone":
            assert self.peers is not None
            summary = f"{self.peers.describe(self.gone)}; in {phase} {elapsed:.0f}s after start"
            code = exitcodes.PEER_GONE
        elif kind == "deadline":
            summary = (
                f"startup deadline {spec.startup_timeout_s:g}s exceeded in {phase} ({in_phase:.0f}s in that phase)"
            )
            code = exitcodes.DEADLINE
        else:
            exited = "" if main_alive else f"; main process {self.main_pid} exited"
            summary = (
                f"crashed in {phase}: {reason}{exited}"
                if reason
                else f"main process {self.main_pid} exited in {phase} after {elapsed:.0f}s "
                f"without an error line in the log"
            )
            code = exitcodes.CRASH
        # The evidence first (bounded, while the stuck ranks exist), then the kill, then the
        # records, best effort: a full or read-only state directory must not save a stalled start.
        record = diagnosis.collect(
            spec,
            kind,
            summary,
            phase=phase,
            seconds_in_phase=in_phase,
            seconds_stalled=stalled,
            reason=reason,
            main_pid=self.main_pid,
        )
        # the host's metrics as the gate decided (a stall: verdict stalled, its phase, the silent
        # seconds), before the kill: a killed server's last words (multiprocessing's unstamped
        # warnings) would read as fresh output; a revert's start then keeps them until its switch ends
        self._export()
        # the verdict too, before the kill: status then reads the gate's word, not the dying server's
        # last lines, while the unit is still activating (failed_at marks it as this start's)
        state.update_status(
            spec,
            verdict=f"failed: {summary}",
            failed_at=decided,  # epoch seconds: when the gate decided, and the last progress it saw
            last_progress_at=decided - stalled,
        )
        killed = kind != "crash" and self._kill_main()  # a stall, deadline or lost peer: nothing to drain
        path = diagnosis.save(spec, record)
        self.phase_seconds[phase] = round(in_phase, 3)
        state.update_status(spec, diagnosis=path, startup_phases=self.phase_seconds, startup_s=round(elapsed, 3))
        note = f"\nsent SIGKILL to main PID {self.main_pid}: nothing to drain before ready" if killed else ""
        self.say(
            f"FAILED: {summary}{note}\ndiagnosis: {path or 'not written (state directory not writable)'}", error=True
        )
        return code

    def _kill_main(self) -> bool:
        """A server that never became ready has nothing to drain: SIGKILL its main PID (the ranks
        follow by PDEATHSIG, systemd's cgroup kill takes the rest). Once HTTP is up SGLang answers
        SIGTERM by draining, which waits for the hung warm-up request until TimeoutStopSec, with
        the GPUs held all along."""
        return self.main is not None and procs.kill(self.main)
