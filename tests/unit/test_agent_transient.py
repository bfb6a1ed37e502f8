"""The switch's transient mode (the benchmark's starts) on a pretend host (fake_host.py): the
switch's own steps (stop what runs, GPUs verified free, start, readiness gate, revert to what ran
before), recording nothing: no release written, no unit enabled or disabled, current and pending
untouched, no files restored."""

import json
import os

import pytest

from sglang_pve.agent import cli, exitcodes, switch
from sglang_pve.agent.release_store import ReleaseError, Store
from tests.unit.agent_support import FakeHost, messages, rendered, write_spec

A, B = "sglang-a.service", "sglang-b.service"
GPU_FREE_TIMEOUT_S = 60


@pytest.fixture
def host(tmp_path, monkeypatch, agent_env):
    """Configuration a runs; GPU memory stays in use for two nvidia-smi queries after a stop."""
    return FakeHost(tmp_path, monkeypatch, units={A: {"ActiveState": "active"}}, linger=2)


@pytest.fixture
def store(tmp_path):
    """The host's current release, ready: configurations a (its active one) and b. The GPUs' wait is
    bounded far above the fake's two lingering queries, which take seconds on a loaded machine."""
    for server in ("a", "b"):
        write_spec(tmp_path, server=server, gpu_free_timeout_s=GPU_FREE_TIMEOUT_S)
    lock = tmp_path / "sglang-1.0.lock"
    lock.write_text("sglang==1.0 --hash=sha256:00\n")
    conf = tmp_path / "sglang.conf"
    conf.write_text("recorded\n")
    store = Store(str(tmp_path / "releases"))
    release = store.record(
        {
            "sglang_version": "1.0",
            "venv": str(tmp_path / "venv"),
            "lock": str(lock),
            "active_server": "a",
            "lifecycle": str(tmp_path / "specs" / "a.lifecycle.json"),
            "units": [A, B],
            "nccl_profile": "p",
            "files": rendered(conf),
        }
    )
    release["status"] = "ready"
    store.save(release)
    store.set_current(release["id"])
    conf.write_text("edited after the deploy\n")  # a transient switch restores no file
    return store


def store_files(store) -> dict:
    """Every file of the store and its bytes: equal means nothing was recorded, marked or pruned."""
    found = {}
    for root, _, names in os.walk(store.dir):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                found[os.path.join(root, name)] = handle.read()
    return found


def transient(tmp_path, store, server):
    say = messages()
    code = switch.transient(store, server, say, spec_dir=str(tmp_path / "specs"))
    return code, say.said


def verbs(host) -> list:
    """The systemctl calls other than `show`, as 'verb unit'."""
    return [" ".join(call) for call in host.calls() if call[0] != "show"]


def test_a_transient_switch_stops_waits_for_free_gpus_starts_fresh_and_records_nothing(tmp_path, host, store):
    before = store_files(store)
    code, said = transient(tmp_path, store, "b")
    assert code == exitcodes.OK, said
    assert verbs(host) == [f"stop {A}", f"reset-failed {A}", f"start {B}"]  # no reload, enable or disable
    log = host.log()
    queries = [answer for tool, answer, *_ in log[: log.index(["systemctl", "start", B])] if tool == "nvidia-smi"]
    assert queries == ["busy", "busy", "free"]  # waited until the memory was released, then started
    assert host.state(A) == "inactive" and host.state(B) == "active"
    assert host.state(B, "UnitFileState") is None and host.state(A, "UnitFileState") is None
    assert store_files(store) == before and store.pending() is None
    assert (tmp_path / "sglang.conf").read_text() == "edited after the deploy\n"
    assert "b runs (transient: no release recorded)" in said
    assert sorted(json.loads(said[-1].removeprefix("switch-timings "))) == [
        "gpus_free_s",
        "start_s",
        "stop_s",
        "total_s",
    ]

    assert transient(tmp_path, store, "b")[0] == exitcodes.OK  # fresh: also when it runs already
    assert verbs(host)[-3:] == [f"stop {B}", f"reset-failed {B}", f"start {B}"]

    assert transient(tmp_path, store, None)[0] == exitcodes.OK  # none: stop only
    assert verbs(host)[-2:] == [f"stop {B}", f"reset-failed {B}"] and host.state(B) == "inactive"
    assert store_files(store) == before


def test_a_failed_gate_reverts_to_what_ran_before_and_records_nothing(tmp_path, host, store):
    diagnoses = tmp_path / "state" / "diagnoses"
    diagnoses.mkdir(parents=True)
    host.change(
        fail_start={B: {"diagnosis": {"dir": str(diagnoses), "server": "b", "summary": "stalled in cuda_graph"}}}
    )
    before = store_files(store)
    code, said = transient(tmp_path, store, "b")
    assert code == exitcodes.SWITCH_REVERTED, said
    assert verbs(host) == [f"stop {A}", f"reset-failed {A}", f"start {B}", f"reset-failed {B}", f"start {A}"]
    assert host.state(A) == "active" and host.state(B) == "inactive"
    failure = next(line for line in said if line.startswith("transient switch to b failed: "))
    assert "Job for sglang-b.service failed" in failure and "diagnosis: stalled in cuda_graph" in failure
    assert said[-2].startswith("reverted: a runs again") and "start_s" in said[-1]
    assert store_files(store) == before  # no release marked failed, no pending left


@pytest.mark.parametrize("state", ["activating", "reloading"])
def test_a_unit_starting_or_reloading_ran_before_and_is_reverted_to(tmp_path, host, store, state):
    host.change(units={A: {"ActiveState": state}}, fail_start={B: {}})  # e.g. a start of a still in its gate
    code, said = transient(tmp_path, store, "b")
    assert code == exitcodes.SWITCH_REVERTED, said
    assert verbs(host)[0] == f"stop {A}" and verbs(host)[-1] == f"start {A}" and host.state(A) == "active"


def test_a_draining_unit_is_stopped_but_did_not_run(tmp_path, host, store):
    host.change(units={A: {"ActiveState": "deactivating"}}, fail_start={B: {}})
    code, said = transient(tmp_path, store, "b")
    assert code == exitcodes.SWITCH_REVERTED and "reverted: no server runs again" in said[-2]
    assert "reverting to no server, which ran before" in said
    assert verbs(host)[0] == f"stop {A}" and f"start {A}" not in verbs(host)


def test_nothing_to_revert_to_when_the_same_configuration_ran_before(tmp_path, host, store):
    host.change(units={B: {"ActiveState": "active"}}, fail_start={B: {}})
    code, said = transient(tmp_path, store, "b")
    assert code == exitcodes.SWITCH_FAILED and "no other configuration ran before: nothing to revert to" in said
    assert verbs(host) == [f"stop {B}", f"reset-failed {B}", f"start {B}", f"reset-failed {B}"]


def test_the_start_never_comes_while_the_gpus_are_busy(tmp_path, host, store):
    host.change(linger=10**6)  # the memory is never released
    for server in ("a", "b"):
        write_spec(tmp_path, server=server, gpu_free_timeout_s=1)  # the wait that must end
    code, said = transient(tmp_path, store, "b")
    assert code == exitcodes.SWITCH_FAILED  # the revert to a waits for the GPUs too
    assert not [verb for verb in verbs(host) if verb.startswith("start")]
    failure = next(line for line in said if line.startswith("transient switch to b failed: "))
    assert "the GPUs are not free 1s after the stop: GPU 0: 81000 MiB used" in failure
    assert "revert to a failed too: the GPUs are not free" in said[-2]
    assert "gpus_free_s" not in json.loads(said[-1].removeprefix("switch-timings "))  # how far it got


def test_the_command_line_runs_a_configuration_of_the_current_release_only(tmp_path, host, store, capsys):
    args = ["transient", "--dir", store.dir, "--spec-dir", str(tmp_path / "specs")]
    assert cli.main([*args, "--server", "b"]) == exitcodes.OK
    assert "b runs (transient: no release recorded)" in capsys.readouterr().out
    assert cli.main([*args, "--server", "c"]) == exitcodes.USAGE
    assert "'c' is not a configuration of release" in capsys.readouterr().err
    assert verbs(host) == [f"stop {A}", f"reset-failed {A}", f"start {B}"]
    with pytest.raises(SystemExit):
        cli.main([*args, "--server", "../b"])
    with pytest.raises(ReleaseError, match="no current release"):
        switch.transient(Store(str(tmp_path / "none")), "b", messages())


@pytest.mark.parametrize(
    "running, failing, errors",
    [
        (A, [B], ["transient switch to b failed", "reverted"]),
        (B, [B], ["transient switch to b failed", "no other configuration ran before"]),
        (A, [A, B], ["transient switch to b failed", "revert to a failed too"]),
    ],
)
def test_failures_go_to_the_journal_as_errors(tmp_path, host, store, monkeypatch, capsys, running, failing, errors):
    """Under systemd every message also goes to the journal; the failure and revert ones as errors."""
    import syslog

    logged = []
    monkeypatch.setenv("INVOCATION_ID", "0123")
    monkeypatch.setattr(syslog, "openlog", lambda *args: None)
    monkeypatch.setattr(syslog, "syslog", lambda priority, text: logged.append((priority, text)))
    host.change(units={running: {"ActiveState": "active"}}, fail_start={unit: {} for unit in failing})
    args = ["transient", "--dir", store.dir, "--spec-dir", str(tmp_path / "specs"), "--server", "b"]
    cli.main(args)
    assert [text.split(":")[0] for priority, text in logged if priority == syslog.LOG_ERR] == errors
    if errors[-1] == "reverted":
        assert (syslog.LOG_INFO, "reverting to a, which ran before") in logged
    timings = json.loads(logged[-1][1].removeprefix("switch-timings "))
    assert list(timings) == sorted(timings) and all(round(value, 2) == value for value in timings.values())
