"""A bench in progress is marked on the host (tools/bench/runner.py): a later bench finds the mark
of one that died (SIGKILL runs no finally), restores what ran before it, and says so."""

import subprocess
from types import SimpleNamespace

from sglang_pve.tools.bench import runner


class LocalHost:
    """Runs the runner's shell commands here (the mark's path moved under tmp_path)."""

    name = "sglang1"
    print_prefix = "[sglang1] "

    def run_shell_command(self, command, print_output=False):
        done = subprocess.run(command.get_raw_value(), shell=True, capture_output=True, text=True)
        return done.returncode == 0, SimpleNamespace(stdout=done.stdout, output_lines=done.stdout.splitlines())

    def put_file(self, data, path, print_output=False):
        with open(path, "wb") as handle:
            handle.write(data.read())


def job(tmp_path) -> runner.Job:
    return runner.Job(
        run_id="20261201T160000Z-sglang1",
        configs=["eagle3-2step"],
        endpoints={},
        all_servers=["baseline", "eagle3-2step"],
        plan={},
        nccl_profile="p",
        sglang_version="1.0",
        results_dir=tmp_path,
        lease="tok",
    )


def test_a_bench_that_died_is_recovered_by_the_next_one(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "MARK", str(tmp_path / "in-progress.json"))
    monkeypatch.setattr(runner, "REMOTE_DIR", str(tmp_path))
    monkeypatch.setattr(runner, "CLIENT", str(tmp_path / "client.py"))
    host = LocalHost()
    restored, measured, said = [], [], []
    monkeypatch.setattr("pyinfra.host", host, raising=False)
    monkeypatch.setattr(runner, "_say", lambda h, text: said.append(text))
    monkeypatch.setattr(runner, "_running_now", lambda h, servers: "eagle3-2step")  # what the dead bench left
    monkeypatch.setattr(runner, "_restore", lambda h, previous, lease: restored.append(previous) or True)
    monkeypatch.setattr(runner, "_report", lambda *a: None)

    def measure(h, j, name, position):
        measured.append(runner._dead_bench(h))  # marked during the run
        return {"configuration": name}

    monkeypatch.setattr(runner, "_measure", measure)
    runner._mark(host, "20261201T150000Z-sglang1", "baseline")  # a bench killed mid-run left this
    runner.run(job(tmp_path))
    assert restored == ["baseline", "baseline"]  # at once, and again at the end: never eagle3-2step
    assert said[0] == "bench run 20261201T150000Z-sglang1 died mid-run: baseline ran before it"
    assert measured[0]["run_id"] == "20261201T160000Z-sglang1" and measured[0]["before"] == "baseline"
    assert runner._dead_bench(host) is None  # this run ended: no mark

    monkeypatch.setattr(runner, "_restore", lambda h, previous, lease: False)  # the restore failed
    runner.run(job(tmp_path))
    assert runner._dead_bench(host)["before"] == "eagle3-2step"  # kept: the next run tries again
