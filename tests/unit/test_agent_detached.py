"""A switch in a transient unit of its own (agent/detached.py): the systemd-run command line, the
outcome it leaves on the host, and the agent's --detach end to end with a systemd-run that runs
the command the way systemd would (its argv after `--`, output and exit code passed through)."""

import json
import os
import stat
import subprocess
import sys

import pytest

from sglang_pve.agent import cli, detached, exitcodes
from sglang_pve.agent.release_store import Store


def test_the_unit_runs_the_same_agent_command_with_its_output_and_exit_code_piped():
    argv = ["apply", "--dir", "/var/lib/sglang-pve/releases", "--lease", "aaa", "--spec", "e30="]
    unit = "sglang-pve-switch-1764600000000.service"
    line = detached.command(argv, unit, "/usr/bin/systemd-run", "/opt/agent.pyz", python="/usr/bin/python3")
    assert line[: line.index("--")] == [
        "/usr/bin/systemd-run",
        "--unit",
        unit,
        "--description",
        "sglang-pve switch (agent apply)",
        "--collect",
        "--pipe",
        "--quiet",
        "--service-type=exec",
    ]
    assert line[line.index("--") + 1 :] == ["/usr/bin/python3", "/opt/agent.pyz", *argv, "--in-unit", unit]


def test_the_outcome_says_running_then_ended_with_the_code_and_current(tmp_path):
    unit = "sglang-pve-switch-5.service"
    with detached.recorded(str(tmp_path), unit, "switch", "aaa", lambda: "r2") as done:
        running = detached.read(str(tmp_path))
        assert (running["state"], running["code"], running["lease"], running["command"]) == (
            "running",
            None,
            "aaa",
            "switch",
        )
        done(exitcodes.SWITCH_REVERTED)
    ended = detached.read(str(tmp_path))
    assert (ended["state"], ended["code"], ended["current"], ended["unit"]) == ("ended", 9, "r2", unit)
    assert ended["ended"] >= ended["started"] and "seen" not in ended
    assert stat.S_IMODE(os.stat(tmp_path / detached.OUTCOME).st_mode) == 0o600
    assert "ended " + ended["ended"] + " with exit 9" in detached.describe(ended)


def test_a_body_that_raised_ends_with_its_error(tmp_path):
    with pytest.raises(RuntimeError), detached.recorded(str(tmp_path), "u", "apply", None, lambda: None):
        raise RuntimeError("boom")
    ended = detached.read(str(tmp_path))
    assert (ended["state"], ended["code"], ended["error"]) == ("ended", None, "RuntimeError: boom")
    assert detached.describe(ended).endswith("in error: RuntimeError: boom")


def test_not_in_a_unit_nothing_is_written(tmp_path):
    with detached.recorded(str(tmp_path), None, "apply", "aaa", lambda: None) as done:
        assert done(3) == 3
    assert detached.read(str(tmp_path)) is None


def test_only_seen_once_ended(tmp_path):
    with detached.recorded(str(tmp_path), "u", "apply", None, lambda: None):
        detached.mark_seen(str(tmp_path))  # running: nobody saw it end
        assert "seen" not in detached.read(str(tmp_path))
    detached.mark_seen(str(tmp_path))
    assert detached.read(str(tmp_path))["seen"] is True


@pytest.fixture
def fake_systemd_run(tmp_path, monkeypatch):
    """systemd-run as PID 1 would run the unit: the argv after `--`, with INVOCATION_ID set; it
    logs its own arguments."""
    log = tmp_path / "systemd-run.log"
    tool = tmp_path / "systemd-run"
    tool.write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {log}\n"
        'while [ "$1" != "--" ]; do shift; done; shift\nINVOCATION_ID=x exec "$@"\n'
    )
    tool.chmod(0o755)
    monkeypatch.setenv("SGLANG_PVE_SYSTEMD_RUN", str(tool))
    return log


def _agent(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_pve.agent", *argv], capture_output=True, text=True, timeout=60)


def test_detach_runs_the_command_in_a_unit_that_records_its_outcome(tmp_path, fake_systemd_run):
    releases = tmp_path / "releases"
    done = _agent("transient", "--dir", str(releases), "--detach")  # no current release: refused (usage)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "no current release" in done.stderr
    argv = fake_systemd_run.read_text().splitlines()
    unit = argv[argv.index("--unit") + 1]
    assert unit.startswith(detached.UNIT_PREFIX) and "--detach" not in argv and argv[-2:] == ["--in-unit", unit]


def test_detach_records_what_the_switch_in_the_unit_did(tmp_path, fake_systemd_run):
    """A switch to a release that does not exist fails inside the unit: its exit code comes back
    through systemd-run, and the outcome on the host says why."""
    with Store(str(tmp_path)).locked(None):
        pass
    done = _agent("switch", "--dir", str(tmp_path), "--to", "nope", "--detach")
    assert done.returncode == exitcodes.USAGE, done.stderr
    ended = detached.read(str(tmp_path))
    assert (ended["state"], ended["command"], ended["code"]) == ("ended", "switch", None)
    assert "ReleaseError" in ended["error"] and "nope" in ended["error"]


def test_without_systemd_run_the_command_runs_in_the_session(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SGLANG_PVE_SYSTEMD_RUN", "")
    assert cli.main(["transient", "--dir", str(tmp_path), "--detach"]) == exitcodes.USAGE
    captured = capsys.readouterr()
    assert "systemd-run not found: the switch runs in this SSH session" in captured.out
    assert "no current release" in captured.err


def test_in_unit_takes_only_a_detached_switchs_unit_name(tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["transient", "--dir", str(tmp_path), "--in-unit", "sshd.service"])


def test_the_releases_report_carries_the_last_outcome(tmp_path, capsys):
    with detached.recorded(str(tmp_path), "u", "apply", "aaa", lambda: None) as done:
        done(0)
    assert cli.main(["releases", "--dir", str(tmp_path)]) == exitcodes.OK
    assert json.loads(capsys.readouterr().out)["switch"]["lease"] == "aaa"
