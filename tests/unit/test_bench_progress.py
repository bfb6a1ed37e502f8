"""The bench's live progress (tools/bench/progress.py, issue 18 deliver 4): the client's progress
file as it runs, the lines the controller makes of it and of the starting switch's status."""

import json
import logging
import time

import gevent
import gevent.event
import pytest
from pyinfra.api import StringCommand
from pyinfra.connectors.util import CommandOutput, OutputLine

from sglang_pve.agent import bench_client as client
from sglang_pve.deploy import progress
from sglang_pve.tools.bench.progress import client_line, client_watch, starting_watch

HOSTILE = "decode\x1b[2J\n[sglang1] bench: forged\u202e"


def test_the_client_rewrites_its_progress_file_while_requests_run_and_at_the_end(tmp_path, monkeypatch):
    path = tmp_path / "progress-baseline.json"
    seen = []

    def generate(host, port, text, output_len, api_key=None):
        # the request under way: what the controller reads once the progress thread rewrote the file
        # with this request's count, at least 0.2 s in (bounded, not timed: a loaded machine is slow)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.05)
            record = json.loads(path.read_text()) if path.exists() else {}
            if record.get("done") == len(seen) and record.get("seconds", 0) > 0.2:
                break
        seen.append(record)
        request = client.Request()
        request.output_len = 4
        return request

    monkeypatch.setattr(client, "generate", generate)
    monkeypatch.setattr(client, "PROGRESS_EVERY_S", 0.02)
    plan = {"server": "baseline", "host": "127.0.0.1", "port": 1, "output_len": 4, "progress_file": str(path)}
    client.run(plan, ["a", "b", "c"], 1, "single-stream decode", phase="measuring")
    assert [(s["phase"], s["label"], s["done"], s["total"]) for s in seen] == [
        ("measuring", "single-stream decode", n, 3) for n in range(3)
    ]
    assert seen[0]["seconds"] > 0.2  # rewritten while the first request ran, not only at the start
    final = json.loads(path.read_text())
    assert (final["done"], final["total"], final["output_tokens"]) == (3, 3, 12)
    assert not (tmp_path / "progress-baseline.json.tmp").exists()  # renamed into place
    text = client_line("baseline", "1/2", path.read_text(), 5.4)
    assert text.startswith("progress: bench baseline (1/2) measuring: single-stream decode 3/3 requests, ")
    assert text.endswith(" output tok/s, 5 s")


def test_a_client_without_a_progress_file_runs_as_before(monkeypatch, tmp_path):
    monkeypatch.setattr(client, "generate", lambda *args, **kwargs: client.Request())
    monkeypatch.chdir(tmp_path)
    run = client.run({"server": "b", "host": "h", "port": 1, "output_len": 1}, ["a"], 1, "warm-up", phase="warmup")
    assert len(run["requests"]) == 1 and list(tmp_path.iterdir()) == []


def test_client_lines_before_the_first_write_escaped_and_refused():
    assert client_line("baseline", "2/3", "", 3.2) == "progress: bench baseline (2/3) client starting, 3 s"
    record = {"phase": "warmup", "label": HOSTILE, "done": 0, "total": 2, "output_tokens": 0, "seconds": 0.0}
    text = client_line("baseline", "2/3", json.dumps(record), 12)
    assert (
        text
        == "progress: bench baseline (2/3) warmup: decode\\x1b[2J\\n[sglang1] bench: forged\\u202e 0/2 requests, 12 s"
    )
    for bad in ({**record, "done": "7"}, {**record, "total": True}, {**record, "output_tokens": -1}):
        with pytest.raises(ValueError):
            client_line("baseline", "2/3", json.dumps(bad), 1)
    with pytest.raises(ValueError):
        client_line("baseline", "2/3", "[1]", 1)


class ClientHost:
    """pyinfra's host while the client runs: the command returns once its progress file was read twice."""

    name, print_prefix = "sglang1", "[sglang1] "

    def __init__(self):
        self.reads, self.ended = 0, gevent.event.Event()

    def run_shell_command(self, command, print_output=False, **kwargs):
        assert not print_output
        text = str(command)
        if text.startswith("cat "):
            self.reads += 1
            if self.reads == 2:
                self.ended.set()
            record = {"phase": "measuring", "label": "concurrency 4", "done": self.reads * 5, "total": 10}
            record |= {"output_tokens": 320 * self.reads, "seconds": 2.0 * self.reads}
            return True, CommandOutput([OutputLine("stdout", json.dumps(record))])
        assert text.startswith("python3 ")
        self.ended.wait()
        return True, CommandOutput([OutputLine("stdout", "bench baseline: done")])


def test_the_client_command_logs_its_progress_file_while_it_runs(monkeypatch, caplog):
    monkeypatch.setattr(progress, "INTERVAL_S", 0.01)
    watch = client_watch("baseline", "1/1", "/var/lib/sglang-pve/bench/progress-baseline.json")
    assert watch.command == "cat /var/lib/sglang-pve/bench/progress-baseline.json 2>/dev/null || true"
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        ok, output = progress.run_followed(ClientHost(), StringCommand("python3", "client.py"), watch=watch)
    assert ok and output.stdout_lines == ["bench baseline: done"]
    lines = [r.getMessage() for r in caplog.records if "progress:" in r.getMessage()]
    assert [line.rsplit(",", 1)[0] for line in lines] == [
        "[sglang1] progress: bench baseline (1/1) measuring: concurrency 4 5/10 requests, 160.0 output tok/s",
        "[sglang1] progress: bench baseline (1/1) measuring: concurrency 4 10/10 requests, 160.0 output tok/s",
    ]


def test_a_starting_configuration_says_bench_position_seconds_then_the_servers_phase():
    watch = starting_watch("eagle3", "2/3")
    assert " status --json " in watch.command
    report = {"servers": [{"server": "eagle3", "phase": "weights", "seconds_in_phase": 9.6}]}
    report["servers"][0] |= {"verdict": "starting (weights, 10s)", "last_log_line": "Load weight begin."}
    assert watch.say([json.dumps(report)], 31.2) == (
        "progress: bench eagle3 (2/3) starting 31 s: eagle3 weights 10 s, starting (weights, 10s); "
        "last: Load weight begin."
    )
