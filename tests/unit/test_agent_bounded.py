"""A hung nvidia-smi cannot hang the agent: every tool runs in its own process group, bounded for
real, the group killed and abandoned on timeout. Two fakes: one that never exits, and one that
answers and exits but leaves a child holding its output pipe (subprocess.run(timeout=) then
waits for EOF forever). prestart, gate, watchdog and status each return within their bound plus
30 s (the bound of `communicate` below), and say why."""

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sglang_pve.agent import bounded, exitcodes, gpus, state
from tests.unit.agent_support import (
    HealthServer,
    agent,
    sleeper,
    stop,
    systemctl_calls,
    write_spec,
)

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd

SMI_TIMEOUT_S = 1.0
FAKES = {
    "never exits": "echo $$ > {pids}\nexec sleep 1000\n",
    "child holds the pipe": "sleep 1000 &\necho $! > {pids}\necho '0, GPU-a, NVIDIA H200, 3, 143771, 0'\nexit 0\n",
}


@pytest.fixture(params=list(FAKES))
def hung_smi(request, tmp_path, monkeypatch):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + FAKES[request.param].format(pids=tmp_path / "smi.pids"))
    script.chmod(0o755)
    monkeypatch.setenv("SGLANG_PVE_NVIDIA_SMI", str(script))
    monkeypatch.setenv("SGLANG_PVE_NVIDIA_SMI_TIMEOUT", str(SMI_TIMEOUT_S))
    return tmp_path / "smi.pids"


def finish(child, bound_s: float) -> str:
    """The command's output; a hang past bound + 30 s fails the test (TimeoutExpired)."""
    out, _ = child.communicate(timeout=bound_s + 30)
    return out


@pytest.fixture
def groups(monkeypatch) -> list[int]:
    """The process groups bounded.run makes (each its child's PID), recorded as it spawns them: known
    to the test even where the tool was killed before it could write its PID (a 0.5-1 s bound on a
    loaded machine can end before a fresh shell ran its first line)."""
    spawned: list[int] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            spawned.append(self.pid)

    monkeypatch.setattr(bounded.subprocess, "Popen", Recorded)
    return spawned


def assert_group_killed(pgid: int) -> None:
    """No process of the group is left (zombies aside: their parent reaps them), within a bound that
    only a survivor reaches: the whole group got SIGKILL, the pipe-holding child too."""

    def members() -> list[int]:
        found = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(int(entry))
        return found

    deadline = time.monotonic() + 60
    while members() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert members() == []


def test_the_tool_and_its_pipe_holding_child_are_killed_and_abandoned(hung_smi, groups):
    with pytest.raises(gpus.GpuQueryError, match="did not answer within 1s"):
        gpus.query_gpus()
    (group,) = groups
    assert_group_killed(group)


def test_a_fast_tool_answers_in_full():
    done = bounded.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_prestart_gives_up_at_its_bound(tmp_path, hung_smi):
    spec = write_spec(tmp_path, gpu_free_timeout_s=2)
    out = finish(agent("prestart", "--spec", spec.path), spec.gpu_free_timeout_s + SMI_TIMEOUT_S)
    assert "did not answer within 1s" in out and "cannot start sglang-t1.service" in out


def test_the_gate_still_kills_a_stalled_start(tmp_path, hung_smi):
    spec = write_spec(tmp_path, stall_timeout_s={"dist_init": 0.5})
    state.write_offset(spec, 0)
    main = sleeper()
    try:
        child = agent("gate", "--spec", spec.path, "--main-pid", str(main.pid))
        finish(child, spec.stall_timeout("launch") + 2 * SMI_TIMEOUT_S)
        assert child.returncode == exitcodes.STALL
        assert main.wait(timeout=10) == -9  # the stalled start was killed
    finally:
        stop(main)
    (diag,) = [json.loads(p.read_text()) for p in Path(spec.diagnoses_dir).glob("*.json")]
    assert "did not answer within 1s" in diag["gpu_error"]


def test_the_watchdog_still_restarts_a_wedged_server(tmp_path, hung_smi):
    spec = write_spec(tmp_path)
    main = sleeper()
    try:
        with HealthServer(spec.port, {"/health_generate": [503]}):
            child = agent("watchdog", "--spec", spec.path, "--main-pid", str(main.pid))
            finish(child, spec.watchdog.failures * (spec.watchdog.interval_s + spec.watchdog.timeout_s) + SMI_TIMEOUT_S)
    finally:
        stop(main)
    assert child.returncode == exitcodes.OK
    assert ["restart", "--no-block", "sglang-t1.service"] in systemctl_calls(tmp_path)


def test_status_answers(tmp_path, hung_smi):
    spec = write_spec(tmp_path)
    child = agent("status", "--json", "--spec-dir", str(Path(spec.path).parent))
    report = json.loads(finish(child, 2 * SMI_TIMEOUT_S + 20))  # two nvidia-smi calls, one systemctl
    assert "did not answer within 1s" in report["gpu_error"]
    assert [s["server"] for s in report["servers"]] == ["t1"]


def test_an_unwritable_state_directory_does_not_save_a_wedged_server(tmp_path):
    """Full or read-only: every write under state_dir fails (its parent is a plain file here;
    the tests run as root, for whom mode bits do not stop writes). The watchdog restarts anyway."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    spec = write_spec(tmp_path, state_dir=str(blocker / "state"), diagnoses_dir=str(blocker / "diagnoses"))
    main = sleeper()
    try:
        with HealthServer(spec.port, {"/health_generate": [503]}):
            child = agent("watchdog", "--spec", spec.path, "--main-pid", str(main.pid))
            out = finish(child, 10)
    finally:
        stop(main)
    assert child.returncode == exitcodes.OK
    assert ["restart", "--no-block", "sglang-t1.service"] in systemctl_calls(tmp_path)
    assert "cannot record the restart" in out and "diagnosis: not written" in out


def test_an_unwritable_state_directory_does_not_save_a_stalled_start(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    spec = write_spec(
        tmp_path,
        stall_timeout_s={"dist_init": 0.5},
        state_dir=str(blocker / "state"),
        diagnoses_dir=str(blocker / "diagnoses"),
    )
    main = sleeper()
    try:
        child = agent("gate", "--spec", spec.path, "--main-pid", str(main.pid))
        out = finish(child, 10)
        assert child.returncode == exitcodes.STALL and main.wait(timeout=10) == -9
    finally:
        stop(main)
    assert "diagnosis: not written" in out


def test_the_abandoned_child_is_reaped_once_its_group_is_killed(groups):
    with pytest.raises(bounded.Timeout):
        bounded.run(["sh", "-c", "sleep 1000 & wait"], 0.5)
    (group,) = groups
    assert_group_killed(group)
    reapers = [t for t in threading.enumerate() if t.name.startswith("reap-")]
    for thread in reapers:
        thread.join(10)
    assert not any(thread.is_alive() for thread in reapers)  # no zombie left behind
