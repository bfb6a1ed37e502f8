"""The watchdog: consecutive counted failures, no counting while the log grows, restart, cap."""

import json
import socket
import threading
from pathlib import Path

import pytest

from sglang_pve.agent import exitcodes, restarts, state, stopping, watchdog
from tests.unit.agent_support import (
    HealthServer,
    LogScript,
    append,
    fake_systemctl,
    messages,
    sleeper,
    stop,
    systemctl_calls,
    write_spec,
)

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd

NOISE = [
    '[2026-07-20 10:00:00] INFO:     127.0.0.1:5 - "GET /health_generate HTTP/1.1" 503 Service Unavailable',
    "[2026-07-20 10:00:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
    '[2026-07-20 10:00:00] INFO:     10.0.0.9:7 - "GET /metrics HTTP/1.1" 200 OK',
    "[2026-07-20 10:00:00 sglang-pve watchdog] the agent's own line",
]
DECODE = (
    "[2026-07-20 10:00:00 TP0] Decode batch, #running-req: 12, #token: 40211, token usage: 0.04, "
    "accept len: 2.85, cuda graph: True, gen throughput (token/s): 88.13, #queue-req: 3"
)
BOUND_S = 60.0  # run_until's bound on a watch whose awaited messages never come


def run(spec, main):
    say = messages()
    return watchdog.run(spec, main.pid, say, tick_s=0.01), say.said


def run_until(spec, main, seen):
    """The watchdog until what it said shows `seen(said)`; then the test ends the "server" by its PID.
    Not a fixed timer: under load the probes come late, and the watch must not end before they came.
    BOUND_S ends it anyway (the test then fails on what was said), so it cannot hang."""
    said = []

    def say(text, error=False):
        said.append(text)
        if seen(said):
            main.kill()
            main.wait()  # gone before the watchdog looks again: no probe of a server being killed

    bound = threading.Timer(BOUND_S, main.kill)
    bound.start()
    try:
        return watchdog.run(spec, main.pid, say, tick_s=0.01), said
    finally:
        bound.cancel()


def diagnoses(spec):
    return [json.loads(p.read_text()) for p in sorted(Path(spec.diagnoses_dir).glob("*.json"))]


def test_consecutive_failures_with_only_probe_noise_in_the_log_restart_the_unit(tmp_path):
    spec = write_spec(tmp_path)
    main = sleeper()
    LogScript(spec.log, NOISE * 20, delay=0.005).start()
    try:
        with HealthServer(spec.port, {"/health_generate": [503]}):
            code, said = run(spec, main)
        assert main.poll() is None  # a restart is systemd's job, the watchdog kills nothing
    finally:
        stop(main)
    assert code == exitcodes.OK
    assert [m.split(": ")[-1] for m in said if "log is silent" in m] == ["1/3", "2/3", "3/3"]
    assert ["restart", "--no-block", "sglang-t1.service"] in systemctl_calls(tmp_path)
    assert len(restarts.in_window(spec)) == 1
    (diag,) = diagnoses(spec)
    assert diag["kind"] == "wedged" and diag["phase"] == "ready"
    assert "failed 3 times in a row (last: HTTP 503)" in diag["summary"] and "restart 1/2" in diag["summary"]
    assert state.read_status(spec)["verdict"].startswith("restarting: wedged")


def test_failures_while_the_log_grows_are_not_counted(tmp_path):
    spec = write_spec(tmp_path)
    main = sleeper()

    def busy(path, hits):  # a busy server logs a batch while its probe fails: the log grows between probes
        append(spec.log, DECODE + "\n")

    try:
        with HealthServer(spec.port, {"/health_generate": [503]}, on_request=busy) as server:
            code, said = run_until(spec, main, lambda said: sum("not counted" in m for m in said) >= 3)
    finally:
        stop(main)
    assert code == exitcodes.OK
    assert server.hits["/health_generate"] >= 3
    assert any("but the log grew: busy, not counted" in m for m in said)
    assert not any("log is silent" in m for m in said)
    assert systemctl_calls(tmp_path) == [] and diagnoses(spec) == []
    assert "is gone; watchdog exits" in said[-1]


def test_a_success_resets_the_count(tmp_path):
    spec = write_spec(tmp_path)
    main = sleeper()
    try:
        with HealthServer(spec.port, {"/health_generate": [503, 503, 200] * 200}):
            code, said = run_until(spec, main, lambda said: any("answers again" in m for m in said))
    finally:
        stop(main)
    assert code == exitcodes.OK
    assert any("answers again after 2 failure(s)" in m for m in said)
    assert systemctl_calls(tmp_path) == []


def test_restart_cap_fails_the_unit_by_killing_its_main_pid(tmp_path, monkeypatch):
    spec = write_spec(tmp_path)
    main = sleeper()
    monkeypatch.setenv(
        "SGLANG_PVE_SYSTEMCTL",
        str(fake_systemctl(tmp_path, {"sglang-t1.service": {"ActiveState": "active", "MainPID": str(main.pid)}})),
    )
    restarts.record(spec)
    restarts.record(spec)  # max_restarts=2 already used within the window
    try:
        with HealthServer(spec.port, {"/health_generate": [503]}):
            code, said = run(spec, main)
        assert main.wait(timeout=10) == -9
    finally:
        stop(main)
    assert code == exitcodes.RESTART_CAP
    assert not any(call[0] == "restart" for call in systemctl_calls(tmp_path))
    assert ["show", "-p", "MainPID", "--value", "sglang-t1.service"] in systemctl_calls(tmp_path)
    (diag,) = diagnoses(spec)
    assert diag["kind"] == "restart_cap"
    verdict = state.read_status(spec)["verdict"]
    assert verdict.startswith("failed: watchdog restart cap reached (2 restarts within 3600s); wedged")
    assert len(restarts.in_window(spec)) == 2
    assert any(f"sent SIGKILL to main PID {main.pid}" in m for m in said)
    assert stopping.take(spec, "failing")  # poststop: failed on purpose, no crash restart (crashes.py)


def test_a_failing_restart_command_fails_the_unit_instead(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, watchdog={"failures": 1})
    main = sleeper()
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, {}, restart_rc=1)))
    try:
        with HealthServer(spec.port, {"/health_generate": [500]}):
            code, said = run(spec, main)
        assert main.wait(timeout=10) == -9
    finally:
        stop(main)
    assert code == exitcodes.RESTART_CAP
    assert any("cannot restart" in m for m in said)


def test_no_answer_at_all_counts_as_failure(tmp_path):
    spec = write_spec(tmp_path, watchdog={"failures": 2, "timeout_s": 0.2})
    main = sleeper()
    try:
        code, said = run(spec, main)  # nothing listens on the port
    finally:
        stop(main)
    assert code == exitcodes.OK
    assert ["restart", "--no-block", "sglang-t1.service"] in systemctl_calls(tmp_path)
    assert "Connection refused" in diagnoses(spec)[0]["summary"]


def test_answers_again_after_failures_reset_the_recorded_count(tmp_path):
    spec = write_spec(tmp_path, watchdog={"failures": 5})
    main = sleeper()
    try:
        with HealthServer(spec.port, {"/health_generate": [503, 503, 200]}):
            code, said = run_until(spec, main, lambda said: any("answers again" in m for m in said))
    finally:
        stop(main)
    assert code == exitcodes.OK and any("answers again after 2 failure(s)" in m for m in said)
    assert state.read_status(spec)["watchdog"] == {"failures": 0, "failing_since": None}


def _group(port: int, rank: int = 0) -> dict:
    return {
        "name": "g",
        "rank": rank,
        "nnodes": 2,
        "dist_init_port": port,
        "addresses": ["127.0.0.1"] * 2,
        "rank0_port": 1,
    }


def test_a_tp_group_member_whose_peer_is_gone_is_killed_not_restarted(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))  # rank 0's TCPStore; the test is rank 1
    spec = write_spec(tmp_path, group=_group(listener.getsockname()[1]))
    peer = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    main = sleeper()
    threading.Timer(0.5, lambda: (peer.close(), accepted.close())).start()  # rank 1 dies
    try:
        with HealthServer(spec.port, {"/health_generate": [200]}):
            code, said = run(spec, main)
        main.wait(timeout=10)
    finally:
        stop(main)
        listener.close()
    assert code == exitcodes.PEER_GONE and main.returncode == -9
    assert not any(call[0] == "restart" for call in systemctl_calls(tmp_path))
    (diag,) = diagnoses(spec)
    assert diag["kind"] == "peer_gone" and "rank 1 (127.0.0.1) gone" in diag["summary"]
    assert state.read_status(spec)["verdict"].startswith("failed: TP group g")


def test_a_wedged_tp_group_member_is_failed_never_restarted_alone(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    spec = write_spec(tmp_path, group=_group(listener.getsockname()[1]))
    peer = socket.create_connection(listener.getsockname())  # rank 1 stays connected: only the wedge
    main = sleeper()
    try:
        with HealthServer(spec.port, {"/health_generate": [503]}):
            code, said = run(spec, main)
        main.wait(timeout=10)
    finally:
        stop(main)
        peer.close()
        listener.close()
    assert code == exitcodes.RESTART_CAP and main.returncode == -9
    assert not any(call[0] == "restart" for call in systemctl_calls(tmp_path))
    (diag,) = diagnoses(spec)
    assert "never restarted alone" in diag["summary"]
