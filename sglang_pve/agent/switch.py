"""The atomic switch to a release: stop -> GPUs verified free -> start -> readiness gate, and back.

    switch(store, release, say, keep=5, venvs_dir="/opt/sglang/venvs")  # exit code

1. The release's files are put in place byte for byte (a no-op after a deploy wrote them; what
   a rollback restores), then systemd reloads. The running server is untouched until here.
2. Every toolkit unit of this release and of the current one is stopped (a requested stop is
   not a failure: reset-failed), then the GPUs must be free: no process holds /dev/nvidia* and
   every GPU's memory is idle, within the active server's gpu_free_timeout_s.
3. The active server's unit is started; `systemctl start` returns once the readiness gate
   (ExecStartPost) passed or failed it.
4. Ready: the unit is enabled (the others disabled), the release becomes `current`, old
   releases are pruned. Not ready: the release is marked failed with the reason and the
   gate's diagnosis, the previous release's files are restored and its server started again
   the same way; the exit code is non-zero either way, and the message names the diagnosis.

The last line printed is `switch-timings {"stop_s": ..., "gpus_free_s": ..., "start_s": ..., "total_s": ...}`.

A TP group's rank switches with revert=False: a failed start is marked failed and the switch
stays pending (exit 14), nothing restarted here; the controller then reverts every rank of the
group as one once every rank stopped (deploy/group_switch.py), each with

    revert(store, "20261130T114354Z-3f2a9c1d", say, previous_id=..., why="rank 1 failed")  # exit code

(back to that release, what ran before the group's switch, also on a rank whose own switch passed).

    transient(store, "eagle3-3step", say)  # exit code

The same steps 2 and 3 for a configuration of the current release, recording nothing (step 1 and
4 are the release's): no files restored, no enable or disable, no release saved, marked, made
current or pruned. Not ready: what ran before runs again, the same way. The benchmark's starts.
"""

import contextlib
import json
import os
import subprocess
import time

from sglang_pve.agent import (
    contract,
    diagnosis,
    exitcodes,
    gpus,
    holders,
    metrics,
    overrides,
    release_store,
    state,
    switch_history,
    systemd,
)
from sglang_pve.agent import spec as spec_module
from sglang_pve.agent.output import Say
from sglang_pve.agent.release_store import ReleaseError, Store, ready
from sglang_pve.agent.state import Record

POLL_S = 0.2


class SwitchError(RuntimeError):
    pass


# OSError: a restore that hits a full disk (ENOSPC) or a read-only file system fails the switch, no traceback
_ERRORS = (SwitchError, ReleaseError, spec_module.SpecError, systemd.SystemdError, subprocess.TimeoutExpired, OSError)


def _systemctl(*args: str, timeout: float | None = 60) -> subprocess.CompletedProcess[str]:
    tool = overrides.systemctl()
    if tool is None:
        raise SwitchError("systemctl not found")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _stop(units: list[str], say: Say) -> None:
    for unit in systemd.in_states(units, systemd.HOLDING):  # a draining unit too: stop waits for it
        say(f"stopping {unit}")
        done = _systemctl("stop", unit, timeout=None)  # bounded by the unit's TimeoutStopSec
        _systemctl("reset-failed", unit)
        if done.returncode != 0:
            raise SwitchError(f"systemctl stop {unit} failed: {done.stderr.strip()}")


def _gpus_busy(lifecycle: spec_module.Spec) -> str | None:
    """What still holds the GPUs, or None when they are free."""
    found = holders.scan(lifecycle.unit_prefix)
    try:
        listed = gpus.query_gpus()
    except gpus.GpuQueryError as error:
        return f"nvidia-smi failed: {error}"
    busy = gpus.busy(listed or [], lifecycle.gpu_idle_mib)
    if not found and not busy:
        return None
    return "; ".join([h.describe() for h in found] + [f"GPU {g.index}: {g.memory_used_mib} MiB used" for g in busy])


def _wait_gpus_free(lifecycle: spec_module.Spec) -> None:
    deadline = time.monotonic() + lifecycle.gpu_free_timeout_s
    while (busy := _gpus_busy(lifecycle)) is not None:
        if time.monotonic() > deadline:
            raise SwitchError(f"the GPUs are not free {lifecycle.gpu_free_timeout_s:g}s after the stop: {busy}")
        time.sleep(POLL_S)


def _failure(lifecycle: spec_module.Spec, started_at: float, stderr: str) -> str:
    """Why the start failed: systemd's words and the gate's diagnosis written since started_at."""
    reason = stderr.strip().splitlines()[0] if stderr.strip() else "the unit did not become active"
    path = diagnosis.latest(lifecycle)
    document = None
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError):
            document = None
    if document and path and os.path.getmtime(path) >= started_at - 1:
        return f"{reason} diagnosis: {document['summary']} ({path})"
    return f"{reason} (no diagnosis written; see journalctl -u {lifecycle.unit})"


def _run(store: Store, release: Record, say: Say, timings: dict[str, float], transient: bool = False) -> str | None:
    """Switch to `release`; None when its server is ready, else why not. Transient: the files
    stay as they are and no unit is enabled or disabled."""
    if not transient:
        changed = store.restore(release)
        if changed:
            say(f"restored {len(changed)} file(s) of release {release['id']}: {', '.join(changed)}")
        _systemctl("daemon-reload")
    previous = store.current()
    mark = time.monotonic()
    _stop(sorted(set(release["units"]) | set(previous["units"] if previous else [])), say)
    timings["stop_s"] = round(time.monotonic() - mark, 2)
    if not release["active_server"]:
        return None
    lifecycle = spec_module.load(release["lifecycle"])
    mark = time.monotonic()
    _wait_gpus_free(lifecycle)
    timings["gpus_free_s"] = round(time.monotonic() - mark, 2)
    mark, started_at = time.monotonic(), time.time()
    say(f"starting {lifecycle.unit} (SGLang {release['sglang_version']}), waiting for its readiness gate")
    done = _systemctl("start", lifecycle.unit, timeout=None)  # bounded by the unit's TimeoutStartSec
    timings["start_s"] = round(time.monotonic() - mark, 2)
    if done.returncode != 0:
        failure = _failure(lifecycle, started_at, done.stderr)
        _systemctl("reset-failed", lifecycle.unit)
        return failure
    if transient:
        return None
    others = [u for u in release["units"] if u != lifecycle.unit]
    _systemctl("enable", lifecycle.unit)
    if others:
        _systemctl("disable", *others)
    return None


def _make_current(
    store: Store, release: Record, say: Say, keep: int, venvs_dir: str | None, previous: str | None = None
) -> None:
    """`release` runs: it becomes current, and `previous` (when given) where a rollback goes."""
    release.update(status="ready", failure=None)
    store.save(release)
    store.set_current(release["id"])
    if previous is not None:
        store.set_previous(previous)
    removed = store.prune(keep, venvs_dir)
    say(
        f"release {release['id']} runs: {release['active_server'] or 'no server'} on SGLang {release['sglang_version']}"
        + (f"; pruned {len(removed)} old release(s)" if removed else "")
    )


def adopt(store: Store, release_id: str, say: Say, keep: int = 5, venvs_dir: str | None = None) -> int:
    """The release's server already runs with these files (only files no process reads changed)."""
    _make_current(store, store.get(release_id), say, keep, venvs_dir)
    return exitcodes.OK


def apply(
    store: Store,
    spec: Record,
    say: Say,
    keep: int = 5,
    venvs_dir: str | None = None,
    record_only: bool = False,
    bench_mark: str = contract.BENCH_MARK,
    revert: bool = True,
) -> int:
    """Record the release `spec` describes (its files as rendered, checked on disk) and switch to it.
    Called under the deploy lock, so what it finds is what runs: a release with the current
    release's contents whose server is ready (a rerun after a controller dropped while another run's
    switch went on) is adopted as it runs, no new record, no restart; record_only (the controller
    saw that only files no process reads changed) records it and makes it current, no restart.
    A benchmark's mark left by a bench that died (this run holds the lock) goes: the deploy runs
    its release's configuration again, and says so."""
    dead = state.read_json(bench_mark)
    if dead is not None:
        say(
            f"bench run {dead.get('run_id')} died mid-run ({dead.get('before') or 'no server'} ran before it): "
            f"this deploy runs {spec['active_server'] or 'no server'}, its release's configuration"
        )
        with contextlib.suppress(OSError):
            os.unlink(bench_mark)
    current = store.current()
    if current is not None and _same_and_ready(store, current, spec):
        say(f"release {current['id']} runs these contents already and its server is ready: adopted, not restarted")
        return exitcodes.OK
    release = store.record(spec)
    say(f"recorded release {release['id']}")
    if record_only:
        return adopt(store, release["id"], say, keep, venvs_dir)
    return switch(store, release["id"], say, keep, venvs_dir, revert=revert)


def _same_and_ready(store: Store, current: Record, spec: Record) -> bool:
    """`spec` would record `current` again (same contents, the files on disk the rendered ones), no
    switch was left unfinished, and current's server passed its gate and runs (or none runs)."""
    files = {path: {"sha256": digest} for path, digest in spec["files"].items()}
    if store.pending() is not None or release_store.fingerprint(spec, files) != current["fingerprint"]:
        return False
    if store.differing(current) or spec["venv"] != current["venv"]:
        return False
    return ready(current, systemd.in_states(current["units"], ("active",)))


def switch(
    store: Store,
    release_id: str,
    say: Say,
    keep: int = 5,
    venvs_dir: str | None = None,
    rollback: bool = False,
    revert: bool = True,
) -> int:
    """rollback: a switch back to a recorded release (tasks/rollback.py): it stays where a rollback
    goes; otherwise the release that ran before does. revert=False (a TP group's rank): a failed
    start is not reverted here; the switch stays pending until the group's revert (revert())."""
    started = time.monotonic()
    timings: dict[str, float] = {}
    release, previous = store.get(release_id), store.current()
    store.set_pending(release["id"])  # until the switch ends: a kill before then leaves it for a rerun
    try:
        failure = _run(store, release, say, timings)
    except _ERRORS as error:
        failure = str(error)
    timings["total_s"] = round(time.monotonic() - started, 2)
    if failure is None:
        before = previous["id"] if previous is not None and previous["id"] != release["id"] else None
        _make_current(store, release, say, keep, venvs_dir, release["id"] if rollback else before)
        store.set_pending(None)
        say("switch-timings " + json.dumps(timings, sort_keys=True))
        return _counted(store, release, "ready", timings, say, exitcodes.OK)

    release.update(status="failed", failure=failure)
    store.save(release)
    say(f"switch to release {release['id']} failed: {failure}", error=True)
    if not revert:
        say(
            f"not reverted here: this is a rank of a TP group, whose ranks revert together (release "
            f"{release['id']} stays pending until then)"
        )
        say("switch-timings " + json.dumps(timings, sort_keys=True))
        return _counted(store, release, "failed", timings, say, exitcodes.GROUP_FAILED)
    if previous is None or previous["id"] == release["id"]:
        say("no previous release to revert to", error=True)
        return _counted(store, release, "failed", timings, say, exitcodes.SWITCH_FAILED)
    say(f"reverting to release {previous['id']} ({previous['active_server']}, SGLang {previous['sglang_version']})")
    try:
        revert_failure = _run(store, previous, say, {})
    except _ERRORS as error:
        revert_failure = str(error)
    if revert_failure:
        say(
            f"revert to release {previous['id']} failed too: {revert_failure}. Runs now: "
            f"{_now(release, previous)}; release {release['id']} stays pending. Fix: remove that cause (a full "
            f"disk, GPUs held), then run the deploy again or tasks/rollback.py --data to={previous['id']}",
            error=True,
        )
        return _counted(store, release, "failed", timings, say, exitcodes.SWITCH_FAILED)
    store.set_pending(None)
    say(f"reverted: release {previous['id']} runs again. The switch to {release['id']} failed: {failure}", error=True)
    say("switch-timings " + json.dumps(timings, sort_keys=True))
    return _counted(store, release, "reverted", timings, say, exitcodes.SWITCH_REVERTED)


def revert(
    store: Store,
    to_id: str,
    say: Say,
    previous_id: str | None = None,
    why: str = "its TP group's switch failed",
) -> int:
    """A TP group's rank goes back to release `to_id`, what ran before its group's switch, because
    that switch failed on some rank (`why`); the controller runs it on every rank of the group once
    each has stopped. The release this rank switched to fails with `why` (also when its own start
    passed: it serves with the other ranks or not at all); `to_id` becomes current again and
    `previous_id` where a rollback goes, as before the switch."""
    started, timings = time.monotonic(), dict[str, float]()
    target = store.get(to_id)
    tried = {store.pending(), store.current_id()} - {None, to_id}
    for release_id in sorted(r for r in tried if r is not None):
        record = store.get(release_id)
        if record.get("status") != "failed":
            record.update(status="failed", failure=why)
            store.save(record)
        store.set_pending(release_id)  # until the revert ends: what runs is unknown
    say(
        f"reverting with its TP group ({why}) to release {to_id} ({target['active_server']}, "
        f"SGLang {target['sglang_version']})"
    )
    try:
        failure = _run(store, target, say, timings)
    except _ERRORS as error:
        failure = str(error)
    timings["total_s"] = round(time.monotonic() - started, 2)
    if failure:
        say(
            f"revert to release {to_id} failed: {failure}. Fix: remove that cause (a full disk, GPUs held), then run "
            f"the deploy again or tasks/rollback.py --data to={to_id}",
            error=True,
        )
        return exitcodes.SWITCH_FAILED
    store.set_current(to_id)
    store.set_previous(previous_id)
    store.set_pending(None)
    say(f"reverted: release {to_id} runs again")
    say("switch-timings " + json.dumps(timings, sort_keys=True))
    return exitcodes.OK


def _counted(store: Store, release: Record, result: str, timings: dict[str, float], say: Say, code: int) -> int:
    """The switch's outcome into the switch history, and the host's metrics written (metrics.py)."""
    switch_history.record(store.dir, release["id"], result, timings)
    lifecycle = release.get("lifecycle")
    unwritten = metrics.export(os.path.dirname(lifecycle) if lifecycle else contract.SERVERS_DIR, store.dir)
    if unwritten:
        say(unwritten, error=True)
    return code


def _now(*records: Record) -> str:
    """Which of the records' units run now, for the last line of a switch that could not revert."""
    try:
        running = systemd.in_states(sorted({u for r in records for u in r["units"]}), systemd.RUNNING)
    except (systemd.SystemdError, OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return ", ".join(running) or "nothing"


def transient(store: Store, server: str | None, say: Say, spec_dir: str = contract.SERVERS_DIR) -> int:
    """Run configuration `server` of the current release (None: none) through the same steps, fresh
    (also when it runs already), recording nothing: no release, no enable or disable, no prune,
    `current` and `pending` untouched. Not ready: what ran before runs again (nothing, when nothing
    did). The benchmark's starts: as releases they would push the real ones out of the history."""
    current = store.current()
    if current is None:
        raise ReleaseError(f"no current release in {store.dir}; run deploy.py first")
    if server is not None and contract.unit_name(server) not in current["units"]:
        raise ReleaseError(f"{server!r} is not a configuration of release {current['id']}; run deploy.py first")
    timings: dict[str, float] = {}
    code = _transient(store, current, server, say, timings, spec_dir)
    say("switch-timings " + json.dumps(timings, sort_keys=True))  # also after a failure: how far it got
    return code


def _transient(
    store: Store, current: Record, server: str | None, say: Say, timings: dict[str, float], spec_dir: str
) -> int:
    started = time.monotonic()
    before = None
    try:
        before = _server_of(systemd.in_states(current["units"], systemd.RUNNING))
        failure = _run(store, _running(current, server, spec_dir), say, timings, transient=True)
    except _ERRORS as error:
        failure = str(error)
    timings["total_s"] = round(time.monotonic() - started, 2)
    if failure is None:
        say(f"{server or 'no server'} runs (transient: no release recorded)")
        return exitcodes.OK
    say(f"transient switch to {server or 'no server'} failed: {failure}", error=True)
    if before == server:
        say("no other configuration ran before: nothing to revert to", error=True)
        return exitcodes.SWITCH_FAILED
    say(f"reverting to {before or 'no server'}, which ran before")
    try:
        revert_failure = _run(store, _running(current, before, spec_dir), say, {}, transient=True)
    except _ERRORS as error:
        revert_failure = str(error)
    if revert_failure:
        say(f"revert to {before} failed too: {revert_failure}", error=True)
        return exitcodes.SWITCH_FAILED
    say(f"reverted: {before or 'no server'} runs again. The switch to {server} failed: {failure}", error=True)
    return exitcodes.SWITCH_REVERTED


def _server_of(units: list[str]) -> str | None:
    """The configuration of the first unit in `units` (at most one runs: the units conflict)."""
    return units[0].removeprefix(contract.UNIT_PREFIX).removesuffix(".service") if units else None


def _running(record: Record, server: str | None, spec_dir: str) -> Record:
    """`record` with `server` as the active configuration (its files are all in place)."""
    lifecycle = contract.lifecycle_path(server, spec_dir) if server else None
    return {**record, "active_server": server, "lifecycle": lifecycle}
