"""Live progress while a switch waits (sglang_pve/deploy/progress.py, issue 18 deliver 4): lines are
logged while the command still runs, through printable(), with no control codes of ours."""

import json
import logging
import types

import gevent
import gevent.event
from pyinfra.api import StringCommand
from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_pve.deploy import progress
from sglang_pve.deploy.operations import releases

HOSTILE = "Load weight begin.\x1b[2J\r\u202eforged\n[sglang1] Success"


def _report(phase="weights", seconds=42.4, last=HOSTILE) -> dict:
    return {
        "servers": [
            {"server": "other", "phase": "ready", "seconds_in_phase": 1.0, "verdict": "ready", "last_log_line": "x"},
            {
                "server": "baseline",
                "phase": phase,
                "seconds_in_phase": seconds,
                "verdict": f"starting ({phase}, {seconds:.0f}s)",
                "last_log_line": last,
            },
        ]
    }


def test_follow_emits_while_the_work_runs_and_returns_its_result():
    ended = gevent.event.Event()
    seen: list[tuple[str, bool]] = []
    polls = iter(range(1, 100))

    def poll() -> str:
        n = next(polls)
        if n == 3:
            ended.set()  # the work ends after the third line
        return f"line {n}"

    work = gevent.spawn(lambda: ended.wait() and "result")
    result = progress.follow(work, poll, lambda text: seen.append((text, work.ready())), interval=0.01)
    assert result == "result"
    assert [text for text, _ in seen] == ["line 1", "line 2", "line 3"]
    assert not any(done for _, done in seen)  # every line came while the work still ran


def test_follow_raises_what_the_work_raised():
    work = gevent.spawn(lambda: 1 / 0)
    try:
        progress.follow(work, lambda: "never", lambda text: None, interval=0.01)
    except ZeroDivisionError:
        return
    raise AssertionError("the work's error was swallowed")


def test_a_line_names_the_server_its_phase_seconds_and_last_line_escaped():
    text = progress.line("baseline", _report())
    assert text.startswith("progress: baseline weights 42 s, starting (weights, 42s); last: Load weight begin.")
    assert "\\x1b[2J\\r\\u202eforged\\n[sglang1] Success" in text
    assert not any(ord(c) < 32 or c in "\x7f\u202e" for c in text)


def test_a_line_for_a_long_last_line_a_missing_server_and_no_agent():
    assert progress.line("baseline", _report(last="y" * 500)).endswith("y" * (progress.LAST_LINE_CHARS - 3) + "...")
    assert progress.line("eagle\x1b3", _report()) == "progress: eagle\\x1b3 is not among the host's servers yet"
    assert progress.line("baseline", None) == "progress: the agent is not installed yet"


class SlowHost:
    """pyinfra's host for one switch whose gate waits: the switch's command returns once the
    status was read `polls` times (the simulated slow start), each status a later phase."""

    name, print_prefix = "sglang1", "[sglang1] "

    def __init__(self, polls: int):
        self.polls, self.reads, self.ended = polls, 0, gevent.event.Event()

    def run_shell_command(self, command, print_output=False, **kwargs):
        assert not print_output  # pyinfra would print the host's text raw
        text = str(command)
        if " status --json " in text:
            self.reads += 1
            if self.reads == self.polls:
                self.ended.set()
            report = _report(phase=["weights", "kv_cache", "cuda_graph"][self.reads - 1], seconds=10.0 * self.reads)
            return True, CommandOutput([OutputLine("stdout", json.dumps(report))])
        assert "--detach" in text
        self.ended.wait()
        return True, CommandOutput([OutputLine("stdout", "switch: ready")])


def test_a_switch_whose_start_is_slow_logs_progress_lines_until_it_ends(monkeypatch, caplog):
    monkeypatch.setattr(progress, "INTERVAL_S", 0.01)
    command = releases.transient("baseline", lease="3f9c0a1b")
    assert isinstance(command, progress.FollowedCommand)
    assert str(command) == str(StringCommand(*command.bits))  # the same text: the JSON cases hold
    host = SlowHost(polls=3)
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        ok, output = command.execute(types.SimpleNamespace(print_output=False, print_input=False), host, {})
    assert ok and output.stdout_lines == ["switch: ready"]
    lines = [r.getMessage() for r in caplog.records if "progress:" in r.getMessage()]
    assert [line.split(",")[0] for line in lines] == [
        "[sglang1] progress: baseline weights 10 s",
        "[sglang1] progress: baseline kv_cache 20 s",
        "[sglang1] progress: baseline cuda_graph 30 s",
    ]
    assert all("\x1b" not in line and "\n" not in line and "\\x1b[2J" in line for line in lines)


def test_a_nested_operation_hands_over_the_context_proxy_and_the_command_still_runs(monkeypatch):
    """deploy_when_provisioned runs the container's operations nested, with pyinfra's `host` proxy as
    the host: the greenlet the command runs in has no context of its own, so the real host is used."""
    from pyinfra import host as context_host
    from pyinfra.context import ctx_host

    monkeypatch.setattr(progress, "INTERVAL_S", 0.01)
    command = releases.transient("baseline", lease="3f9c0a1b")
    real = SlowHost(polls=1)
    with ctx_host.use(real):
        ok, output = command.execute(types.SimpleNamespace(print_output=False, print_input=False), context_host, {})
    assert ok and output.stdout_lines == ["switch: ready"]


def test_an_interrupt_where_follow_waits_ends_the_command_too():
    """The bench's SIGINT handler raises in the greenlet that waits (tools/bench/runner.py
    _on_interrupt): the command's greenlet must not go on behind it."""
    work = gevent.spawn(gevent.sleep, 3600)

    def poll() -> str:
        raise KeyboardInterrupt  # what the handler raises where follow() waits, here at the first line

    try:
        progress.follow(work, poll, lambda text: None, interval=0.01)
    except KeyboardInterrupt:
        pass
    assert work.dead  # killed: it would sleep on for an hour


def test_the_benchs_switch_logs_its_progress_through_the_context_proxy(monkeypatch, caplog):
    """tools/bench/runner.py runs the transient switch at execution time with pyinfra's `host` proxy."""
    from pyinfra import host as context_host
    from pyinfra.context import ctx_host

    monkeypatch.setattr(progress, "INTERVAL_S", 0.01)
    real = SlowHost(polls=2)
    with ctx_host.use(real), caplog.at_level(logging.INFO, logger="pyinfra"):
        ok, output = progress.run_followed(context_host, releases.transient("baseline", lease="3f9c0a1b"), "baseline")
    assert ok and output.stdout_lines == ["switch: ready"]
    assert [r.getMessage().split(",")[0] for r in caplog.records if "progress:" in r.getMessage()] == [
        "[sglang1] progress: baseline weights 10 s",
        "[sglang1] progress: baseline kv_cache 20 s",
    ]
