"""No false kills: progress is what SGLang prints, read from the file the server writes.

A fake server process writes its lines to its stdout, which is the log opened in append mode (as
systemd's StandardOutput=append: does); the test rotates the log by rename + create, truncates
it (copytruncate) and deletes it under the gate and the watchdog, sends 404 traffic into a wedge
and logs handled tracebacks during a start."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_pve.agent import exitcodes, gate, logfollow, phases, state, watchdog
from sglang_pve.agent.phases import PhaseTracker
from tests.unit.agent_support import (
    BASELINE_V059,
    HealthServer,
    LogScript,
    messages,
    recorded_sleeps,
    stop,
    systemctl_calls,
    write_spec,
)

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd

DECODE = (
    "[2026-07-20 10:10:00 TP0] Decode batch, #running-req: 12, #token: 40211, token usage: 0.04, "
    "cuda graph: True, gen throughput (token/s): 88.13, #queue-req: 3"
)
SERVER = "import sys, time\nfor line in sys.argv[2:]:\n    print(line, flush=True)\n    time.sleep(float(sys.argv[1]))\ntime.sleep(60)\n"


def server(log: str, lines: list, delay: float) -> subprocess.Popen:
    """A process whose stdout is the log, opened once in append mode, printing `lines`; returned
    once the first is printed: under load its Python starts late, and a gate or watchdog started
    before it printed would see a silent server that is only not started yet."""
    with open(log, "ab") as out:
        start = out.tell()
        child = subprocess.Popen([sys.executable, "-c", SERVER, str(delay), *lines], stdout=out)
    deadline = time.monotonic() + 60
    while lines and os.path.getsize(log) == start and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return child


def rotate(log: str) -> None:
    os.rename(log, log + ".1")
    Path(log).touch()  # logrotate's `create`


def test_the_follower_keeps_the_servers_file_through_rename_delete_and_truncation(tmp_path):
    log = str(tmp_path / "s.log")
    Path(log).write_text("old run\n")
    main = server(log, [], 0)
    try:
        follower = logfollow.LogFollower(log, os.path.getsize(log), logfollow.main_output(main.pid))
        with open(f"/proc/{main.pid}/fd/1", "a") as as_server:  # what the server writes

            def write(text):
                as_server.write(text)
                as_server.flush()

            write("one\n")
            assert follower.poll().lines == ["one"]
            rotate(log)
            write("two\n")
            assert follower.poll().lines == ["two"]  # the renamed file, where the server writes
            os.unlink(log + ".1")
            write("three\n")
            assert follower.poll().lines == ["three"]  # deleted: still open, still written
    finally:
        stop(main)


def test_without_the_servers_descriptor_the_name_is_followed(tmp_path):
    log = str(tmp_path / "s.log")
    Path(log).write_text("a\n")
    follower = logfollow.LogFollower(log, 0)
    assert follower.poll().lines == ["a"]
    with open(log, "a") as old:
        rotate(log)
        old.write("b, written before the rename was noticed\n")
    Path(log).write_text("c, a longer line than the next\n")
    assert follower.poll().lines == ["b, written before the rename was noticed"]
    assert follower.poll().lines == ["c, a longer line than the next"]
    with open(log, "r+") as handle:  # copytruncate
        handle.truncate(0)
    Path(log).write_text("d\n")
    assert follower.poll().lines == ["d"]


@pytest.mark.parametrize("when", ["startup", "serving"])
def test_rotation_and_deletion_cause_no_stall_and_no_restart(tmp_path, monkeypatch, when):
    """The server's lines come in steps, each once the agent polled since the last: lines, the log
    renamed (logrotate's create), lines into the renamed file, the renamed file deleted, lines. A step
    waits for the agent's own poll (its sleep in the gate, its probe in the watchdog), never for a
    fixed time: under load a timer fires before the agent looked or after the server's lines ran out.
    A follower that lost the server's file never sees the lines after the rename: the gate stalls,
    the watchdog counts silent failures and restarts."""
    spec = write_spec(tmp_path, watchdog={"failures": 2})
    state.write_offset(spec, 0)
    main = server(spec.log, [], 0)  # its stdout is the log, opened once in append mode
    as_server = open(f"/proc/{main.pid}/fd/1", "a")  # what the server writes, wherever its file is now

    def write(lines):
        as_server.write("".join(line + "\n" for line in lines))
        as_server.flush()

    if when == "startup":
        third = len(BASELINE_V059) // 3
        chunks = [BASELINE_V059[:third], BASELINE_V059[third : 2 * third], BASELINE_V059[2 * third :]]
    else:
        chunks = [[DECODE]] * 3
    steps = [
        lambda: write(chunks[0]),
        lambda: rotate(spec.log),
        lambda: write(chunks[1]),
        lambda: os.unlink(spec.log + ".1"),
        lambda: write(chunks[2]),
    ]
    try:
        if when == "startup":  # one step per poll of the gate; the ready line comes with the last
            recorded_sleeps(gate, monkeypatch, lambda seconds: steps.pop(0)() if steps else time.sleep(seconds))
            with HealthServer(spec.port, {"/health": [200]}):
                code = gate.run(spec, main.pid, messages(), poll_s=0.05, on_ready=lambda s, pid: 1)
            assert code == exitcodes.OK and not steps
        else:  # one step per probe of the watchdog (a busy server logs while it is probed), then the end

            def probed(path, hits):
                if steps:
                    steps.pop(0)()
                    if hits in (2, 4):  # the rename and the deletion: the probe's lines come after them
                        write([DECODE])
                else:  # the test ends the "server" by its PID, gone before the answer: the probe raced no stop
                    main.kill()
                    main.wait()

            say = messages()
            with HealthServer(spec.port, {"/health_generate": [503]}, on_request=probed):
                code = watchdog.run(spec, main.pid, say, tick_s=0.01)
            assert code == exitcodes.OK and systemctl_calls(tmp_path) == []  # no restart
            assert sum("but the log grew: busy, not counted" in m for m in say.said) == 5
            assert not any("log is silent" in m for m in say.said)
    finally:
        as_server.close()
        stop(main)


def test_404_traffic_keeps_no_wedged_server_alive(tmp_path):
    spec = write_spec(tmp_path)
    main = server(spec.log, [], 0)
    scanner = '[2026-07-20 10:00:00] INFO:     10.9.9.9:4711 - "GET /wp-login.php HTTP/1.1" 404 Not Found'
    LogScript(spec.log, [scanner] * 300, delay=0.005).start()
    try:
        with HealthServer(spec.port, {"/health_generate": [503]}):
            code = watchdog.run(spec, main.pid, messages(), tick_s=0.01)
    finally:
        stop(main)
    assert code == exitcodes.OK
    assert ["restart", "--no-block", "sglang-t1.service"] in systemctl_calls(tmp_path)


HANDLED = [
    "[2026-07-20 10:00:06 TP0] Failed to load optional kernel; falling back",
    "Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/sgl_kernel/__init__.py", line 12, in <module>',
    "ImportError: libcuda.so.1: cannot open shared object file",
    "Exception ignored in: <function _TensorBase.__del__ at 0x7f>",
    "Traceback (most recent call last):",
    "AttributeError: 'NoneType' object has no attribute 'cuda'",
]


def test_a_handled_traceback_does_not_fail_the_start(tmp_path):
    spec = write_spec(tmp_path)
    state.write_offset(spec, 0)
    main = server(spec.log, BASELINE_V059[:3] + HANDLED + BASELINE_V059[3:], 0.01)
    try:
        with HealthServer(spec.port, {"/health": [200]}):
            assert gate.run(spec, main.pid, messages(), poll_s=0.05, on_ready=lambda s, pid: 1) == exitcodes.OK
    finally:
        stop(main)


def test_the_crash_is_named_by_the_exception_that_propagated():
    tracker = PhaseTracker()
    for line in [
        "[2026-07-20 10:00:06 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "KeyError: 'model.layers.0.mlp.experts.w13_weight'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "RuntimeError: Failed to load weights: shard 17 is missing",
        "Exception ignored in: <function Pool.__del__ at 0x7f>",
        "Traceback (most recent call last):",
        "OSError: handle is closed",
        "[2026-07-20 10:00:07] Received sigquit from a child process. It usually means the child failed.",
    ]:
        tracker.feed(line)
    assert tracker.reason == "RuntimeError: Failed to load weights: shard 17 is missing"


@pytest.mark.parametrize(
    "line, access",
    [
        ('[2026-07-20 10:00:00] INFO:     127.0.0.1:50200 - "GET /v1/models HTTP/1.1" 200 OK', True),
        ('[2026-07-20 10:00:00] INFO:     10.1.2.3:9 - "GET /metrics HTTP/1.1" 200 OK', True),
        ('[2026-07-20 10:00:00] INFO:     ::1:50200 - "POST /generate HTTP/1.1" 404 Not Found', True),
        (
            '[2026-07-20 10:00:00 TP0] https://huggingface.co:443 "HEAD /moonshotai/Kimi-K2.5/resolve/main/config.json HTTP/1.1" 404 0',
            False,
        ),
        ("[2026-07-20 10:00:00 TP0] Decode batch, #running-req: 1", False),
    ],
)
def test_access_lines_are_no_progress_and_move_no_phase(line, access):
    assert phases.is_access(line) is access and phases.is_progress(line) is not access
    tracker = PhaseTracker(phase="http")
    tracker.feed(line)
    assert tracker.phase == ("warmup" if "Decode batch" in line else "http")
