"""The readiness gate against a scripted SGLang log and a tiny HTTP server."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from sglang_pve.agent import exitcodes, gate, procs, state, stopping
from sglang_pve.agent.logfollow import size
from tests.unit.agent_support import (
    BASELINE_V059,
    CONTEXT_LENGTH_CRASH,
    EAGLE3_HEAD,
    HealthServer,
    LogScript,
    agent,
    append,
    fake_systemctl,
    messages,
    sleeper,
    stop,
    virtual_clock,
    write_spec,
)

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd
HANG_S = 120  # how long a child process's step may take before it counts as hung (a loaded CI worker: seconds)


def run_gate(spec, main_pid, **kwargs):
    say, started = messages(), []
    code = gate.run(spec, main_pid, say, poll_s=0.05, on_ready=lambda s, pid: started.append(pid) or 99999, **kwargs)
    return code, say.said, started


def diagnoses(spec):
    return [json.loads(p.read_text()) for p in sorted(Path(spec.diagnoses_dir).glob("*.json"))]


def prepared(spec, previous_run=True):
    """What prestart leaves behind: the log with an older run in it, and the offset after it."""
    if previous_run:  # an older start's ready line must not make this start ready
        append(spec.log, "\n".join(BASELINE_V059) + "\n")
    state.write_offset(spec, size(spec.log))


def test_ready_needs_the_ready_line_and_health_200(tmp_path):
    spec = write_spec(tmp_path)
    prepared(spec)
    main_pid = sleeper()
    try:
        with HealthServer(spec.port, {"/health": [503, 503, 200]}) as server:
            LogScript(spec.log, BASELINE_V059, delay=0.01).start()
            code, said, started = run_gate(spec, main_pid.pid)
    finally:
        stop(main_pid)
    assert code == exitcodes.OK
    assert started == [main_pid.pid]  # the watchdog was started for this main PID
    assert server.hits["/health"] == 3  # 503 twice after the ready line, then 200
    changes = [re.search(r"phase \w+ -> (\w+)", m).group(1) for m in said if "phase " in m]
    assert changes == ["dist_init", "weights", "kv_cache", "cuda_graph", "http", "warmup", "ready"]
    assert "'fired up' seen and /health answered 200" in said[-1]
    record = state.read_status(spec)
    assert record["verdict"] == "ready" and record["phase"] == "ready"
    assert diagnoses(spec) == []


def test_stall_fails_within_the_phase_timeout_and_names_the_phase(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, stall_timeout_s={"cuda_graph": 0.5})
    prepared(spec)
    main_pid = sleeper()
    clock = virtual_clock(gate, monkeypatch)  # the log is written already: nothing to wait for but the gate
    try:
        with HealthServer(spec.port, {"/health": [200]}) as server:
            append(spec.log, "\n".join(BASELINE_V059[:15]) + "\n")  # ... Capture cuda graph begin
            code, said, _ = run_gate(spec, main_pid.pid)
    finally:
        stop(main_pid)
    assert code == exitcodes.STALL
    assert 0.5 <= clock.elapsed <= 0.5 + 2 * 0.05  # the phase's limit, within a poll (every other is 60 s)
    assert server.hits.get("/health", 0) == 0  # never ready without the ready line
    (diag,) = diagnoses(spec)
    assert diag["kind"] == "stall" and diag["phase"] == "cuda_graph"
    assert diag["summary"].startswith("stalled in cuda_graph: no log progress for")
    assert "Capture cuda graph begin" in diag["summary"]
    assert diag["log_tail"][-1].startswith("[2026-07-20 10:04:33 TP0] Capture cuda graph begin")
    assert diag["gpus"] is None and diag["holders"] == [] and diag["main_pid"] == main_pid.pid
    assert oct(os.stat(list(Path(spec.diagnoses_dir).glob("*.json"))[0]).st_mode & 0o777) == "0o640"
    assert state.read_status(spec)["verdict"].startswith("failed: stalled in cuda_graph")
    assert "diagnosis: " in said[-1]


def test_a_stalled_start_is_in_the_metrics_file_when_the_gate_fails(tmp_path, monkeypatch):
    """The gate writes the host's metrics while it waits and at its failure, with the unit still
    activating (its ExecStartPost): the stall, its phase and ready 0, before a switch reverts."""
    spec = write_spec(tmp_path, stall_timeout_s={"cuda_graph": 0.5})
    prepared(spec)
    unit = {spec.unit: {"LoadState": "loaded", "ActiveState": "activating", "SubState": "start-post"}}
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, unit)))
    main_pid = sleeper()
    try:
        append(spec.log, "\n".join(BASELINE_V059[:15]) + "\n")  # ... Capture cuda graph begin
        code, _, _ = run_gate(spec, main_pid.pid)
    finally:
        stop(main_pid)
    assert code == exitcodes.STALL
    text = (tmp_path / "node-exporter" / "sglang-pve.prom").read_text()  # agent_env's textfile directory
    assert f'sglang_pve_server_ready{{server="{spec.server}"}} 0.0' in text
    assert f'sglang_pve_server_verdict{{server="{spec.server}",verdict="stalled"}} 1.0' in text
    assert f'sglang_pve_server_phase{{server="{spec.server}",phase="cuda_graph"}} 1.0' in text
    silent = re.search(rf'sglang_pve_server_seconds_since_progress{{server="{spec.server}"}} (\S+)', text)
    assert silent and float(silent[1]) >= 0.5


def test_the_agents_own_lines_are_no_progress_and_before_the_first_line_dist_init_applies(tmp_path):
    spec = write_spec(tmp_path, stall_timeout_s={"dist_init": 0.4}, startup_timeout_s=20)
    prepared(spec, previous_run=False)
    main_pid = sleeper()
    chatter = LogScript(spec.log, ["[2026-07-20 10:00:00 sglang-pve prestart] still talking"] * 100, delay=0.02)
    chatter.start()
    try:
        code, _, _ = run_gate(spec, main_pid.pid)
    finally:
        stop(main_pid)
    assert code == exitcodes.STALL
    assert diagnoses(spec)[0]["phase"] == "launch"


def test_crash_line_fails_fast_with_the_reason(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, speculative=True, stall_timeout_s={p: 30 for p in ("weights", "kv_cache", "draft")})
    prepared(spec)
    main_pid = sleeper()
    try:
        append(spec.log, "\n".join(EAGLE3_HEAD[:7] + CONTEXT_LENGTH_CRASH) + "\n")
        clock = virtual_clock(gate, monkeypatch)  # the fatal line is written already
        code, said, _ = run_gate(spec, main_pid.pid, fatal_grace_s=0.2)
    finally:
        stop(main_pid)
    assert code == exitcodes.CRASH
    assert 0.2 <= clock.elapsed <= 0.2 + 2 * 0.05  # the fatal grace, not the draft's 30 s stall limit
    (diag,) = diagnoses(spec)
    assert diag["kind"] == "crash" and diag["phase"] == "draft"
    assert diag["reason"].startswith("ValueError: Warning: Target model's context_length (262144)")
    assert diag["summary"].startswith("crashed in draft: ValueError: Warning: Target model's context_length")
    assert "FAILED: crashed in draft" in said[-1]


def test_main_pid_exit_fails_the_start(tmp_path):
    spec = write_spec(tmp_path)
    prepared(spec)
    main_pid = sleeper()
    append(spec.log, "\n".join(BASELINE_V059[:8]) + "\n")
    stop(main_pid)
    code, _, _ = run_gate(spec, main_pid.pid)
    assert code == exitcodes.CRASH
    assert diagnoses(spec)[0]["summary"].startswith(f"main process {main_pid.pid} exited in weights")


def test_deadline_fails_even_while_the_log_grows(tmp_path):
    spec = write_spec(tmp_path, startup_timeout_s=0.6)
    prepared(spec)
    main_pid = sleeper()
    bar = LogScript(spec.log, [f"\rMulti-thread loading shards: {i}% Completed" for i in range(100)], delay=0.02)
    bar.start()
    try:
        code, _, _ = run_gate(spec, main_pid.pid)
    finally:
        stop(main_pid)
    assert code == exitcodes.DEADLINE
    assert diagnoses(spec)[0]["summary"].startswith("startup deadline 0.6s exceeded in weights")


def test_gate_command_starts_a_detached_watchdog_that_exits_with_the_main_pid(tmp_path):
    spec = write_spec(tmp_path, watchdog={"interval_s": 0.2})
    prepared(spec)
    main_pid = sleeper()
    try:
        with HealthServer(spec.port, {"/health": [200], "/health_generate": [200]}):
            append(spec.log, "\n".join(BASELINE_V059) + "\n")
            out, _ = agent("gate", "--spec", spec.path, "--main-pid", str(main_pid.pid)).communicate(timeout=HANG_S)
            assert "sglang-pve gate] ready after" in out
            watchdog_pid = int(re.search(r"watchdog PID (\d+)", out).group(1))
            watchdog = procs.identify(watchdog_pid)
            assert procs.alive(watchdog)
            assert os.getsid(watchdog_pid) == watchdog_pid  # its own session
            wait_for(lambda: "sglang-pve watchdog] watching sglang-t1.service" in open(spec.log).read())
    finally:
        stop(main_pid)
    assert procs.wait_gone([watchdog], HANG_S) == []
    assert f"main PID {main_pid.pid} is gone; watchdog exits" in open(spec.log).read()


def wait_for(condition, timeout=HANG_S):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.mark.parametrize("main_dies_first", [False, True])
def test_sigterm_during_startup_is_a_requested_stop_not_a_crash(tmp_path, main_dies_first):
    """systemd signals the whole cgroup at once: the main process may be gone before the gate
    handles its SIGTERM; either way the stop is marked, nothing is recorded as a crash."""
    spec = write_spec(tmp_path)
    prepared(spec)
    main_pid = sleeper()
    try:
        child = agent("gate", "--spec", spec.path, "--main-pid", str(main_pid.pid))
        assert "waiting for sglang-t1.service" in child.stdout.readline()
        if main_dies_first:
            stop(main_pid)
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=HANG_S)
    finally:
        stop(main_pid)
    assert child.returncode == exitcodes.OK  # a failing ExecStartPost would fail the stopped unit
    assert "stopped by SIGTERM in phase launch" in out and "crash" not in out
    assert state.read_status(spec)["verdict"] == "stopped during startup"
    assert not list(Path(spec.diagnoses_dir).glob("*.json"))
    assert stopping.take(spec)


def test_probe_access_lines_are_no_progress_and_a_stall_kills_the_main_pid(tmp_path):
    """A hung warm-up answers every /health probe with 503: those access lines must not reset the
    stall clock, and a server that never served is SIGKILLed (SGLang's SIGTERM drain would wait
    for the hung request, holding the GPUs until TimeoutStopSec)."""
    spec = write_spec(tmp_path, stall_timeout_s={"warmup": 0.5, "http": 0.5}, startup_timeout_s=20)
    prepared(spec)
    main_pid = sleeper()
    up_to_warmup = BASELINE_V059[
        : BASELINE_V059.index(next(line for line in BASELINE_V059 if "Prefill batch" in line)) + 1
    ]
    append(spec.log, "\n".join(up_to_warmup) + "\n")
    probe = '[2026-07-20 10:06:18] INFO:     127.0.0.1:50200 - "GET /health HTTP/1.1" 503 Service Unavailable'
    probes = LogScript(spec.log, [probe] * 400, delay=0.02)
    probes.start()
    try:
        code, said, _ = run_gate(spec, main_pid.pid)
        assert main_pid.wait(timeout=5) == -signal.SIGKILL
    finally:
        stop(main_pid)
    assert code == exitcodes.STALL and diagnoses(spec)[0]["phase"] == "warmup"
    assert f"sent SIGKILL to main PID {main_pid.pid}" in said[-1]


def test_a_rank_above_0_is_ready_at_its_dummy_health_server_once_rank_0_answers(tmp_path):
    from tests.unit.agent_support import free_port

    rank0_port = free_port()
    group = {"name": "g", "rank": 1, "nnodes": 2, "dist_init_port": 1, "addresses": ["127.0.0.1"] * 2}
    spec = write_spec(tmp_path, group={**group, "rank0_port": rank0_port})
    prepared(spec, previous_run=False)
    lines = [
        "[2026-07-20 10:00:00 TP1] Init torch distributed begin.",
        "[2026-07-20 10:00:01 TP1] Capture cuda graph end. Time elapsed: 1.00 s. mem usage=1.00 GB. avail mem=9 GB.",
        f"[2026-07-20 10:00:02] Dummy health check server started in background thread at 127.0.0.1:{spec.port}",
    ]
    main_pid = sleeper()
    try:
        with (
            HealthServer(spec.port, {"/health": [200]}),
            HealthServer(rank0_port, {"/health": [503, 503, 200]}) as rank0,
        ):
            LogScript(spec.log, lines, delay=0.01).start()
            code, said, started = run_gate(spec, main_pid.pid)
    finally:
        stop(main_pid)
    assert code == exitcodes.OK and started == [main_pid.pid]
    assert rank0.hits["/health"] == 3  # not ready while rank 0 answered 503
    assert any("waiting for rank 0 (127.0.0.1:" in m for m in said)
    assert "rank 1's dummy health server line seen" in said[-1]
