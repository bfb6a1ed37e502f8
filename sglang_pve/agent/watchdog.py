"""Liveness after ready: restart a wedged server, fail it for good at the restart cap.

Started by the gate as a detached process in the unit's cgroup (so stopping the unit stops it),
with its output appended to the server log. Every `watchdog.interval_s` it sends
GET /health_generate with `watchdog.timeout_s`. A failure (not 200, or no answer) counts only
while the server shows no legitimate progress: when the log grew since the previous probe with
real work (phases.is_progress: no access line of any client, no probe noise) - e.g. `Decode
batch` lines under load - the failure is not counted and the count starts over (long prefills
make health fail under load). 404s from a scanner keep no wedged server alive.

After `watchdog.failures` consecutive counted failures the server is wedged:
- fewer than `max_restarts` restarts within `window_s`: write a `wedged` diagnosis, record the
  restart (restarts.py), `systemctl restart --no-block UNIT` (the next prestart sleeps the
  backoff), exit 0;
- otherwise: write a `restart_cap` diagnosis, set the verdict "failed: watchdog restart cap
  reached (...)", mark it failing (stopping.py) and SIGKILL the unit's main PID (`systemctl
  show -p MainPID --value UNIT`) so the unit fails and stays failed (no crash restart), exit 8.
A TP group member (spec.group) is never restarted alone (a lone rank cannot rejoin its group):
wedged, it is failed as at the cap; and between probes, every tick, it watches its peers
(peers.py: rank 0 every rank, the others rank 0): a peer gone -> a `peer_gone` diagnosis, the
main PID SIGKILLed, exit 12, so every rank of the group stops when one is gone.
Every metrics.INTERVAL_S, before a probe, it writes the host's metrics (metrics.py) for node_exporter.
It exits 0 as soon as the main PID is gone or a stop is requested (a draining server answers
503: never a reason to restart a unit that is stopping), checked again right before it acts: a
switch that stops a wedged server must not have its stop job replaced by a restart.
"""

import os
import subprocess
import sys
import time
from typing import BinaryIO, TypedDict

from sglang_pve.agent import (
    diagnosis,
    exitcodes,
    health,
    logfollow,
    metrics,
    peers,
    phases,
    procs,
    restarts,
    state,
    stopping,
    systemd,
)
from sglang_pve.agent.output import Say
from sglang_pve.agent.spec import Spec

TICK_S = 1.0  # how often the main PID is checked between probes


class Evidence(TypedDict):
    """What the watchdog knows of a wedged server: diagnosis.collect's keyword arguments."""

    phase: str
    seconds_in_phase: float
    seconds_stalled: float
    main_pid: int


def launch(spec: Spec, main_pid: int | None) -> int:
    """Start `watchdog` detached (own session, same cgroup, output appended to the server log)."""
    prefix, env = self_command()
    command = [*prefix, "watchdog", "--spec", spec.path] + (["--main-pid", str(main_pid)] if main_pid else [])
    log: BinaryIO | int
    try:
        log = open(spec.log, "ab")
    except OSError:
        log = subprocess.DEVNULL
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd="/",
            env=env,
        )
    finally:
        if not isinstance(log, int):  # not DEVNULL
            log.close()
    return child.pid


def self_command() -> tuple[list[str], dict[str, str] | None]:
    """How to run this agent again: ([python, -I, the .pyz], None) from the zipapp, else
    ([python, -m, sglang_pve.agent], environment with PYTHONPATH pointing at the sources)."""
    import sglang_pve

    root = os.path.dirname(os.path.dirname(os.path.abspath(sglang_pve.__file__)))
    if os.path.isfile(root):
        return [sys.executable, "-I", root], None  # isolated: no PYTHON* variables, no user site
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return [sys.executable, "-m", "sglang_pve.agent"], env


def run(spec: Spec, main_pid: int | None, say: Say, *, tick_s: float = TICK_S) -> int:
    wd = spec.watchdog
    if not main_pid:
        try:
            main_pid = systemd.main_pid(spec.unit)
        except systemd.SystemdError as error:
            say(f"no --main-pid and {error}; watchdog exits", error=True)
            return exitcodes.USAGE
    main = procs.identify(main_pid) if main_pid else None
    if main is None:
        say(f"main PID {main_pid} is not running; watchdog exits")
        return exitcodes.OK
    follower = logfollow.LogFollower(spec.log, logfollow.size(spec.log), logfollow.main_output(main.pid))
    ready_at = state.read_status(spec).get("ready_at") or time.time()
    last_growth = time.monotonic()
    failures, failing_since = 0, None
    say(
        f"watching {spec.unit} (main PID {main.pid}): GET /health_generate every {wd.interval_s:g}s, "
        f"timeout {wd.timeout_s:g}s; {wd.failures} consecutive failures with a silent log = wedged"
    )
    watch = peers.PeerWatch(spec.group, connected_now=True) if spec.group else None
    metrics_said: str | None = None  # a metrics failure is said once, not every time
    metrics_due = time.monotonic() + metrics.INTERVAL_S  # the switch that started it wrote them just now
    while True:
        alive, gone = _sleep_while_alive(main, wd.interval_s, tick_s, watch)
        if alive and gone and watch is not None and not stopping.requested(spec):
            evidence: Evidence = {
                "phase": "ready",
                "seconds_in_phase": time.time() - ready_at,
                "seconds_stalled": time.monotonic() - last_growth,
                "main_pid": main.pid,
            }
            return _peer_gone(spec, main, say, watch.describe(gone), evidence)
        if not alive:
            say(f"main PID {main.pid} is gone; watchdog exits")
            return exitcodes.OK
        if stopping.requested(spec):
            say(f"{spec.unit} is being stopped (drain); watchdog exits")
            return exitcodes.OK
        if time.monotonic() >= metrics_due:  # the host's state as metrics, once per scrape interval
            metrics_due = time.monotonic() + metrics.INTERVAL_S
            unwritten = metrics.export(os.path.dirname(spec.path))
            if unwritten and unwritten != metrics_said:
                say(unwritten, error=True)
            metrics_said = unwritten
        result = health.get(spec.host, spec.port, "/health_generate", wd.timeout_s)
        busy = _progressed(follower.poll())
        if busy:
            last_growth = time.monotonic()
        if not procs.alive(main):
            continue  # the probe raced the stop; the next round exits
        if result.ok or busy:
            if not result.ok:
                say(f"/health_generate failed ({result.describe()}) but the log grew: busy, not counted")
            elif failures:
                say(f"/health_generate answers again after {failures} failure(s)")
            if failures:
                state.update_status(spec, watchdog={"failures": 0, "failing_since": None})
            failures, failing_since = 0, None
            continue
        failures += 1
        failing_since = failing_since or time.time()
        say(f"/health_generate failed ({result.describe()}) and the log is silent: {failures}/{wd.failures}")
        state.update_status(spec, watchdog={"failures": failures, "failing_since": failing_since})
        if failures >= wd.failures:
            summary = (
                f"wedged: /health_generate failed {failures} times in a row (last: {result.describe()}) "
                f"with no log progress for {time.monotonic() - last_growth:.0f}s"
            )
            evidence = {
                "phase": "ready",
                "seconds_in_phase": time.time() - ready_at,
                "seconds_stalled": time.monotonic() - last_growth,
                "main_pid": main.pid,
            }
            return _wedged(spec, main, say, summary, evidence)


def _wedged(spec: Spec, main: procs.Proc, say: Say, summary: str, evidence: Evidence) -> int:
    """Act first (restart, or SIGKILL at the cap), record afterwards and best effort: a read-only
    or full state directory must not leave a wedged server unwatched. The evidence is collected
    before acting (bounded: nvidia-smi and py-spy cannot hang us) while the wedged ranks exist."""
    wd, at = spec.watchdog, restarts.now()
    restart = spec.group is None and restarts.may_restart(spec, at)
    count = len(restarts.in_window(spec, at)) + restart
    if restart:
        kind, summary = "wedged", f"{summary}; restart {count}/{wd.max_restarts} within {wd.window_s:g}s"
    elif spec.group is not None:
        kind, summary = "wedged", f"{summary}; a member of TP group {spec.group.name} is failed, never restarted alone"
    else:
        kind, summary = (
            "restart_cap",
            f"watchdog restart cap reached ({count} restarts within {wd.window_s:g}s); {summary}",
        )
    record = diagnosis.collect(spec, kind, summary, **evidence)
    if stopping.requested(spec):  # a stop came while the evidence was collected (a switch): it ends the server
        say(f"{spec.unit} is being stopped: not acting on it ({summary})")
        return exitcodes.OK
    with procs.sigterm_ignored():  # the restart stops this unit, this process included: record first
        restarted = restart and _restart(spec, say)
        if not restarted:
            _kill_main(spec, main, say)
        if restarted:
            try:
                restarts.record(spec, at)
            except OSError as error:
                say(f"cannot record the restart in {spec.state_file('restarts')}: {error}", error=True)
        path = diagnosis.save(spec, record)
        verdict = f"restarting: {summary}" if restarted else f"failed: {summary}"
        state.update_status(spec, verdict=verdict, diagnosis=path)
        say(f"{summary}\ndiagnosis: {path or 'not written (state directory not writable)'}", error=True)
    return exitcodes.OK if restarted else exitcodes.RESTART_CAP


def _peer_gone(spec: Spec, main: procs.Proc, say: Say, summary: str, evidence: Evidence) -> int:
    """A TP group peer is gone: this rank is blocked (or soon will be) in a collective that can
    never complete. Evidence first, then SIGKILL (nothing can be drained), then the records."""
    decided = time.time()
    record = diagnosis.collect(spec, "peer_gone", summary, **evidence)
    with procs.sigterm_ignored():
        _kill_main(spec, main, say)
        path = diagnosis.save(spec, record)
        state.update_status(spec, verdict=f"failed: {summary}", diagnosis=path, failed_at=decided)
        say(f"{summary}\ndiagnosis: {path or 'not written (state directory not writable)'}", error=True)
    return exitcodes.PEER_GONE


def _restart(spec: Spec, say: Say) -> bool:
    try:
        systemd.restart_no_block(spec.unit)
    except systemd.SystemdError as error:
        say(f"cannot restart: {error}; failing the unit instead", error=True)
        return False
    say(f"systemctl restart --no-block {spec.unit}")
    return True


def _kill_main(spec: Spec, main: procs.Proc, say: Say) -> None:
    """SIGKILL the unit's main PID (systemd's view first): the unit fails, Restart=no keeps it so."""
    stopping.mark(spec, "failing")  # poststop: failed on purpose, not a crash to restart (crashes.py)
    try:
        pid = systemd.main_pid(spec.unit) or main.pid
    except systemd.SystemdError:
        pid = main.pid
    target = main if pid == main.pid else procs.identify(pid)
    if target is None or not procs.kill(target):
        say(f"main PID {pid} already gone")
        return
    say(f"sent SIGKILL to main PID {pid}: {spec.unit} fails and stays failed")
    procs.wait_gone([target], 10.0)


def _progressed(update: logfollow.Update) -> bool:
    return update.partial_grew or any(phases.is_progress(line) for line in update.lines)


def _sleep_while_alive(
    main: procs.Proc, seconds: float, tick_s: float, watch: peers.PeerWatch | None = None
) -> tuple[bool, list[int]]:
    """Sleep `seconds` while the main PID lives and (with `watch`) no peer is gone:
    (main alive, the peers gone)."""
    deadline = time.monotonic() + seconds
    while procs.alive(main):
        gone = watch.gone() if watch is not None else []
        if gone:
            return True, gone
        left = deadline - time.monotonic()
        if left <= 0:
            return True, []
        time.sleep(min(tick_s, left))
    return False, []  # our own end closes our connections: no peer is to blame
