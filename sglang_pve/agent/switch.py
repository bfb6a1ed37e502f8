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
"""

import json
import os
import subprocess
import time

from sglang_pve.agent import diagnosis, exitcodes, gpus, holders, overrides, systemd
from sglang_pve.agent import spec as spec_module
from sglang_pve.agent.release_store import ReleaseError, Store

POLL_S = 0.2


class SwitchError(RuntimeError):
    pass


_ERRORS = (SwitchError, ReleaseError, spec_module.SpecError, systemd.SystemdError, subprocess.TimeoutExpired)


def _systemctl(*args: str, timeout: float | None = 60) -> subprocess.CompletedProcess:
    tool = overrides.systemctl()
    if tool is None:
        raise SwitchError("systemctl not found")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout, check=False)


def _stop(units: list, say) -> None:
    for unit in systemd.in_states(units, systemd.HOLDING):  # a draining unit too: stop waits for it
        say(f"stopping {unit}")
        done = _systemctl("stop", unit, timeout=None)  # bounded by the unit's TimeoutStopSec
        _systemctl("reset-failed", unit)
        if done.returncode != 0:
            raise SwitchError(f"systemctl stop {unit} failed: {done.stderr.strip()}")


def _gpus_busy(lifecycle) -> str | None:
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


def _wait_gpus_free(lifecycle) -> None:
    deadline = time.monotonic() + lifecycle.gpu_free_timeout_s
    while (busy := _gpus_busy(lifecycle)) is not None:
        if time.monotonic() > deadline:
            raise SwitchError(f"the GPUs are not free {lifecycle.gpu_free_timeout_s:g}s after the stop: {busy}")
        time.sleep(POLL_S)


def _failure(lifecycle, started_at: float, stderr: str) -> str:
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
    if document and os.path.getmtime(path) >= started_at - 1:
        return f"{reason} diagnosis: {document['summary']} ({path})"
    return f"{reason} (no diagnosis written; see journalctl -u {lifecycle.unit})"


def _run(store: Store, release: dict, say, timings: dict) -> str | None:
    """Switch to `release`; None when its server is ready, else why not."""
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
    others = [u for u in release["units"] if u != lifecycle.unit]
    _systemctl("enable", lifecycle.unit)
    if others:
        _systemctl("disable", *others)
    return None


def _make_current(store: Store, release: dict, say, keep: int, venvs_dir: str | None) -> None:
    release.update(status="ready", failure=None)
    store.save(release)
    store.set_current(release["id"])
    removed = store.prune(keep, venvs_dir)
    say(
        f"release {release['id']} runs: {release['active_server'] or 'no server'} on SGLang {release['sglang_version']}"
        + (f"; pruned {len(removed)} old release(s)" if removed else "")
    )


def adopt(store: Store, release_id: str, say, keep: int = 5, venvs_dir: str | None = None) -> int:
    """The release's server already runs with these files (only files no process reads changed)."""
    _make_current(store, store.get(release_id), say, keep, venvs_dir)
    return exitcodes.OK


def switch(store: Store, release_id: str, say, keep: int = 5, venvs_dir: str | None = None) -> int:
    started = time.monotonic()
    timings: dict = {}
    release, previous = store.get(release_id), store.current()
    store.set_pending(release["id"])  # until the switch ends: a kill before then leaves it for a rerun
    try:
        failure = _run(store, release, say, timings)
    except _ERRORS as error:
        failure = str(error)
    timings["total_s"] = round(time.monotonic() - started, 2)
    if failure is None:
        _make_current(store, release, say, keep, venvs_dir)
        store.set_pending(None)
        say("switch-timings " + json.dumps(timings, sort_keys=True))
        return exitcodes.OK

    release.update(status="failed", failure=failure)
    store.save(release)
    say(f"switch to release {release['id']} failed: {failure}", error=True)
    if previous is None or previous["id"] == release["id"]:
        say("no previous release to revert to", error=True)
        return exitcodes.SWITCH_FAILED
    say(f"reverting to release {previous['id']} ({previous['active_server']}, SGLang {previous['sglang_version']})")
    try:
        revert_failure = _run(store, previous, say, {})
    except _ERRORS as error:
        revert_failure = str(error)
    if revert_failure:
        say(f"revert to release {previous['id']} failed too: {revert_failure}", error=True)
        return exitcodes.SWITCH_FAILED
    store.set_pending(None)
    say(f"reverted: release {previous['id']} runs again. The switch to {release['id']} failed: {failure}", error=True)
    say("switch-timings " + json.dumps(timings, sort_keys=True))
    return exitcodes.SWITCH_REVERTED
