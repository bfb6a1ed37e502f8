"""A crash after ready (the main process ended by itself: an NCCL abort, an Xid, SGLang's own
watchdog-timeout exit) is started again by policy; a failed start is not.

    after_crash(spec, "the main process ended by itself (killed, status 9) ...", say)  # poststop
    restart(spec, say)                                                # NAME.crash-restart.service

Which stop is a crash after ready: stopping.crashed() names a stop nobody asked for, and only
with SERVICE_RESULT=success. systemd gives ExecStopPost= that result only when nothing failed
before: a start whose gate (ExecStartPost=) failed, or whose main process died before the gate
passed, ends with result exit-code/signal (systemd's src/core/service.c, service_sigchld_event),
so a crash before ready is a failed start: never restarted here, the switch's revert handles it.

The engine is systemd, not Restart=: Restart=on-failure decides on the unit's result alone
(service.c, service_shall_restart), so it would also restart a failed start (a failed gate sets
result exit-code), and StartLimitBurst= counts manual starts and deploys too and outlives a
release (systemd.unit(5), StartLimitIntervalSec=: "apply to all kinds of starts (including
manual)"). So the unit keeps Restart=no and poststop, with the policy's answer, leaves a
transient timer NAME.crash-restart.timer (systemd.run_later) that runs `crash-restart` after
the backoff, outside the unit being stopped (no start job of a unit in its own stop).

after_crash keeps the crash's diagnosis (kind `crash`, phase `ready`) and, with
`watchdog.restart_on_crash` (default true) and the cap not reached (restarts.py: the same
`max_restarts` within `window_s` as the watchdog's, counted together, per release), records a
restart and schedules the start `backoff_s * 2**(k-1)` (capped at `backoff_max_s`) from now.
The unit ends this stop failed either way (exit 7): the crash shows in systemctl and the
journal, and status says "restarting in Ns: ..." until the timer fires. restart() checks again
that the unit is still what should run (stopped, the current release's configuration, no
pending switch, no deploy holding the container's lock: that deploy decides what runs) and
`systemctl start --no-block`s it. At the cap, with the policy off, or for a TP group member (a
lone rank cannot rejoin its group; the watchdog fails a member the same way): failed, with the
reason.
"""

import time

from sglang_pve.agent import diagnosis, exitcodes, lease, overrides, restarts, state, systemd, watchdog
from sglang_pve.agent.output import Say
from sglang_pve.agent.release_store import ReleaseError, Store
from sglang_pve.agent.spec import Spec

POLL_S = 0.5
STOP_SLACK_S = 60.0  # above the 40 s the unit's TimeoutStopSec adds (render.py)


def timer_name(spec: Spec) -> str:
    """sglang-baseline.crash-restart: the "." keeps it out of every server unit name (contract.SERVER_NAME)."""
    return f"{spec.unit.removesuffix('.service')}.crash-restart"


def policy(spec: Spec) -> str:
    """The policy as status shows it: "restart (cap 3 within 3600s)", "off" or "off (TP group member)"."""
    wd = spec.watchdog
    if spec.group is not None:
        return "off (TP group member)"
    return f"restart (cap {wd.max_restarts} within {wd.window_s:g}s)" if wd.restart_on_crash else "off"


def not_wanted(spec: Spec) -> str | None:
    """Why this unit should not be started again now (None: it should)."""
    store = Store(overrides.releases_dir())
    if lease.current(store.dir) is not None:
        return "a deploy holds the container's lock (it decides what runs)"
    if store.pending() is not None:
        return "a switch is pending"
    try:
        current = store.current()
    except ReleaseError as error:
        return f"the current release cannot be read: {error}"
    if current is not None and current.get("active_server") != spec.server:
        return f"release {current['id']} runs {current.get('active_server') or 'no server'}"
    return None


def after_crash(spec: Spec, crash: str, say: Say, blocked: str | None = None) -> int:
    """poststop's answer to a crash after ready (`blocked`: why it cannot start again, e.g. the
    GPUs are not free). Returns exit 7: the unit ends this stop failed."""
    wd, at = spec.watchdog, restarts.now()
    ready_at = state.read_status(spec).get("ready_at") or time.time()
    summary = f"crashed after ready: {crash}"
    record = diagnosis.collect(
        spec, "crash", summary, phase="ready", seconds_in_phase=time.time() - ready_at, seconds_stalled=0.0
    )
    path = diagnosis.save(spec, record)
    count = len(restarts.in_window(spec, at))
    why: str | None = blocked
    if why is None and spec.group is not None:
        why = f"a member of TP group {spec.group.name} is never restarted alone (it cannot rejoin its group)"
    elif why is None and not wd.restart_on_crash:
        why = "restart_on_crash is off"
    elif why is None and count >= wd.max_restarts:
        why = f"restart cap reached ({count} restarts within {wd.window_s:g}s)"
    wait = restarts.backoff(spec, count + 1)
    why = why or not_wanted(spec) or _schedule(spec, wait, say)
    if why is None:
        try:
            restarts.record(spec, at)
        except OSError as error:
            say(f"cannot record the restart in {spec.state_file('restarts')}: {error}", error=True)
        verdict = f"restarting in {wait:g}s: {summary}; restart {count + 1}/{wd.max_restarts} within {wd.window_s:g}s"
    else:
        verdict = f"failed: {summary}; not restarted: {why}"
    crash_record = {"summary": summary, "restart_at": None if why else time.time() + wait, "timer": timer_name(spec)}
    state.update_status(spec, verdict=verdict, diagnosis=path, crash=crash_record)
    say(f"{spec.unit} {verdict}\ndiagnosis: {path or 'not written (state directory not writable)'}", error=True)
    return exitcodes.CRASH


def _schedule(spec: Spec, wait: float, say: Say) -> str | None:
    prefix, env = watchdog.self_command()
    command = [*prefix, "crash-restart", "--spec", spec.path]
    path = {"PYTHONPATH": env["PYTHONPATH"]} if env else {}  # run from sources (tests); the zipapp needs none
    try:
        systemd.run_later(timer_name(spec), wait, command, f"Start {spec.unit} again after its crash", path, spec.log)
    except systemd.SystemdError as error:
        return f"cannot schedule its start: {error}"
    say(f"{timer_name(spec)}.timer starts {spec.unit} in {wait:g}s (systemctl stop {timer_name(spec)}.timer cancels)")
    return None


def _active_state(spec: Spec) -> str | None:
    return systemd.active_states([spec.unit])[spec.unit]


def restart(spec: Spec, say: Say, *, poll_s: float = POLL_S) -> int:
    """`crash-restart`: the timer's service. Starts the unit unless something changed meanwhile.
    A unit still `deactivating` is the crash's own stop, still in poststop (a short backoff can
    end first): waited for, within the stop's own bound (the unit's TimeoutStopSec, render.py,
    is stop_timeout_s + gpu_free_timeout_s + 40)."""
    crash = state.read_status(spec).get("crash") or {}
    deadline = time.monotonic() + spec.stop_timeout_s + spec.gpu_free_timeout_s + STOP_SLACK_S
    try:
        found = _active_state(spec)
        while found == "deactivating" and time.monotonic() < deadline:
            time.sleep(poll_s)
            found = _active_state(spec)
    except systemd.SystemdError as error:
        say(f"cannot read the state of {spec.unit}: {error}", error=True)
        return exitcodes.INTERNAL
    why = None if found in systemd.STOPPED else f"it is {found} (started by someone else)"
    why = why or not_wanted(spec)
    if why is None:
        try:
            systemd.start_no_block(spec.unit)
        except systemd.SystemdError as error:
            why = f"cannot start it: {error}"
    if why is not None:
        say(f"not starting {spec.unit} again: {why}")
        if found in systemd.STOPPED and crash.get("summary"):
            verdict = f"failed: {crash['summary']}; not restarted: {why}"
            state.update_status(spec, verdict=verdict, crash={**crash, "restart_at": None})
        return exitcodes.OK
    say(f"systemctl start --no-block {spec.unit} (after its crash)")
    state.update_status(spec, crash={**crash, "restart_at": None})
    return exitcodes.OK
