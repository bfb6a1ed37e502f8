"""The atomic switch (agent/switch.py) through the agent's command line, on a pretend host.

The host is fake_host.py: systemctl keeps unit states, nvidia-smi reports memory in use while a
unit runs and for a few queries after its stop, and a start while the memory is in use fails (as
the unit's prestart would). The releases are real files recorded by the real store. Each test
drives `apply`, `switch` or `releases` as the deploy does and asserts what the host ends up with.
"""

import base64
import json
import os

import pytest

from sglang_pve.agent import cli, exitcodes, metrics, switch, systemd
from sglang_pve.agent.release_store import Store
from tests.unit.agent_support import FakeHost, hold_device, rendered, stop, write_spec

UNITS = ("sglang-a.service", "sglang-b.service")


@pytest.fixture
def host(tmp_path, monkeypatch, agent_env):
    """A host whose GPU memory stays in use for two nvidia-smi queries after a stop."""
    return FakeHost(tmp_path, monkeypatch, linger=2)


def release(tmp_path, active: str | None, version: str = "1.0", gpu_free_timeout_s: float = 60) -> dict:
    """The spec `apply` records: two configurations (a, b), `active` the one that runs."""
    for server in ("a", "b"):
        write_spec(tmp_path, server=server, gpu_free_timeout_s=gpu_free_timeout_s)
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "sglang.conf").write_text(f"active={active} version={version}\n")
    venv = tmp_path / "venvs" / f"sglang-{version}"
    venv.mkdir(parents=True, exist_ok=True)
    lock = tmp_path / "venvs" / f"sglang-{version}.lock"
    lock.write_text(f"sglang=={version} --hash=sha256:00\n")
    return {
        "sglang_version": version,
        "venv": str(venv),
        "lock": str(lock),
        "active_server": active,
        "lifecycle": str(tmp_path / "specs" / f"{active}.lifecycle.json") if active else None,
        "units": list(UNITS),
        "nccl_profile": "p",
        "files": rendered(etc / "sglang.conf"),
        "blocks": {},
        "user": "me@here",
        "commit": "abc",
    }


def apply(tmp_path, spec: dict, *extra: str) -> int:
    encoded = base64.b64encode(json.dumps(spec).encode()).decode()
    return cli.main(["apply", "--dir", str(tmp_path / "releases"), "--spec", encoded, *extra])


def store(tmp_path) -> Store:
    return Store(str(tmp_path / "releases"))


def latest(tmp_path) -> dict:
    return store(tmp_path).get(store(tmp_path).ids()[-1])


def starts(host, unit: str) -> int:
    return host.calls().count(["start", unit])


def test_switch_stops_waits_for_free_gpus_starts_and_enables_the_new_unit(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    assert host.state("sglang-a.service") == "active" and host.state("sglang-a.service", "UnitFileState") == "enabled"
    assert host.state("sglang-b.service", "UnitFileState") == "disabled"
    first = store(tmp_path).current_id()
    capsys.readouterr()

    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.OK
    assert host.state("sglang-a.service") == "inactive" and host.state("sglang-b.service") == "active"
    assert host.state("sglang-b.service", "UnitFileState") == "enabled"
    assert host.state("sglang-a.service", "UnitFileState") == "disabled"
    log = host.log()
    start = log.index(["systemctl", "start", "sglang-b.service"])
    queries = [answer for tool, answer, *_ in log[:start] if tool == "nvidia-smi"]
    assert log.index(["systemctl", "stop", "sglang-a.service"]) < start
    assert queries[-3:] == ["busy", "busy", "free"]  # waited until the memory was released, then started

    current = store(tmp_path).current()
    assert current["id"] != first and current["active_server"] == "b" and current["status"] == "ready"
    assert store(tmp_path).pending() is None
    out = capsys.readouterr().out
    assert f"release {current['id']} runs: b on SGLang 2.0" in out
    assert "stopping sglang-a.service" in out and "starting sglang-b.service (SGLang 2.0)" in out
    timings = json.loads(out.strip().splitlines()[-1].split("switch-timings ", 1)[1])
    assert list(timings) == ["gpus_free_s", "start_s", "stop_s", "total_s"]  # printed with sorted keys
    assert all(value >= 0 and round(value, 2) == value for value in timings.values())  # seconds, 2 decimals


@pytest.mark.parametrize("state", sorted(systemd.HOLDING))
def test_a_unit_in_any_running_state_is_stopped_before_the_start(tmp_path, host, state):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    host.change(units=host.read()["units"] | {"sglang-a.service": {"ActiveState": state}})  # e.g. still starting
    report = json.loads(_releases(tmp_path))
    # a start still in its gate runs; a unit draining on SIGTERM is stopped, but it no longer runs
    assert report["running"] == (["sglang-a.service"] if state != "deactivating" else [])

    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.OK
    assert ["stop", "sglang-a.service"] in host.calls()
    assert host.state("sglang-a.service") == "inactive" and host.state("sglang-b.service") == "active"


def test_a_unit_whose_start_is_queued_runs_and_is_stopped_before_the_start(tmp_path, host):
    """Right after a boot: the unit's start waits as a job for its After= units, ActiveState still
    inactive (agent/systemd.py state). It runs (a deploy then has nothing to switch), and a switch
    stops it, which cancels the job: else it would start the old server beside the new one."""
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    queued = {"ActiveState": "inactive", "SubState": "dead", "Job": "139"}
    host.change(units=host.read()["units"] | {"sglang-a.service": queued})
    assert json.loads(_releases(tmp_path))["running"] == ["sglang-a.service"]

    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.OK
    assert ["stop", "sglang-a.service"] in host.calls()
    assert host.state("sglang-a.service", "Job") == "" and host.state("sglang-b.service") == "active"


@pytest.mark.parametrize("state", ["inactive", "failed"])
def test_a_unit_that_does_not_run_is_not_stopped(tmp_path, host, state):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    host.change(units=host.read()["units"] | {"sglang-a.service": {"ActiveState": state}})
    assert json.loads(_releases(tmp_path))["running"] == []
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.OK
    assert ["stop", "sglang-a.service"] not in host.calls()


def _releases(tmp_path) -> str:
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        assert cli.main(["releases", "--dir", str(tmp_path / "releases")]) == exitcodes.OK
    return out.getvalue()


def test_a_failed_start_reverts_to_the_previous_release_and_ends_the_switch(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    previous = store(tmp_path).current_id()
    diagnoses = tmp_path / "state" / "diagnoses"
    diagnoses.mkdir(parents=True)
    summary = "stalled in cuda_graph: no log progress for 5s"
    fail = {"diagnosis": {"dir": str(diagnoses), "server": "b", "summary": summary}}
    host.change(fail_start={"sglang-b.service": fail})
    capsys.readouterr()

    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_REVERTED
    failed = latest(tmp_path)
    assert failed["status"] == "failed" and "Job for sglang-b.service failed" in failed["failure"]
    assert f"diagnosis: {summary} ({diagnoses}/" in failed["failure"]
    assert store(tmp_path).current_id() == previous and store(tmp_path).pending() is None  # the switch ended
    assert (tmp_path / "etc" / "sglang.conf").read_text() == "active=a version=1.0\n"  # the old files again
    assert host.state("sglang-a.service") == "active" and host.state("sglang-b.service") == "inactive"
    assert starts(host, "sglang-a.service") == 2 and ["reset-failed", "sglang-b.service"] in host.calls()
    out = capsys.readouterr().out
    assert f"reverted: release {previous} runs again" in out and "switch-timings" in out.splitlines()[-1]
    assert f"restored 1 file(s) of release {previous}: {tmp_path / 'etc' / 'sglang.conf'}" in out
    log = host.log()
    reload = len(log) - 1 - log[::-1].index(["systemctl", "daemon-reload"])  # the revert's: after its files
    assert reload < len(log) - 1 - log[::-1].index(["systemctl", "start", "sglang-a.service"])
    assert json.loads(_releases(tmp_path))["pending"] is None


def test_failures_go_to_the_journal_as_errors(tmp_path, host, monkeypatch, capsys):
    """Under systemd every message also goes to the journal; the failure and revert ones as errors."""
    import syslog

    logged = []
    monkeypatch.setenv("INVOCATION_ID", "0123")
    monkeypatch.setattr(syslog, "openlog", lambda *args: None)
    monkeypatch.setattr(syslog, "syslog", lambda priority, text: logged.append((priority, text.split(":")[0])))
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    first = store(tmp_path).current_id()
    host.change(fail_start={"sglang-b.service": {}})
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_REVERTED
    second = latest(tmp_path)["id"]
    out = capsys.readouterr().out
    assert f"reverting to release {first} (a, SGLang 1.0)" in out
    host.change(fail_start={unit: {} for unit in UNITS})
    assert apply(tmp_path, release(tmp_path, "b", "3.0")) == exitcodes.SWITCH_FAILED
    third = latest(tmp_path)["id"]
    errors = [text for priority, text in logged if priority == syslog.LOG_ERR]
    assert errors == [
        f"switch to release {second} failed",
        "reverted",
        f"switch to release {third} failed",
        f"revert to release {first} failed too",
    ]
    timings = [text for _, text in logged if text.startswith("switch-timings")]
    assert timings == ['switch-timings {"gpus_free_s"'] * 2  # the first switch's and the revert's, keys sorted
    store(tmp_path).set_current(third)  # nothing to revert to: a release that failed itself
    assert cli.main(["switch", "--dir", str(tmp_path / "releases"), "--to", third]) == exitcodes.SWITCH_FAILED
    assert [text for priority, text in logged if priority == syslog.LOG_ERR][-1] == "no previous release to revert to"


def test_a_revert_that_fails_too_leaves_the_switch_pending(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    previous = store(tmp_path).current_id()
    host.change(fail_start={unit: {} for unit in UNITS})
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_FAILED
    assert store(tmp_path).current_id() == previous
    assert store(tmp_path).pending() == latest(tmp_path)["id"]  # what runs is unknown: a rerun switches again
    assert f"revert to release {previous} failed too" in capsys.readouterr().out


def test_a_first_release_that_fails_has_nothing_to_revert_to(tmp_path, host, capsys):
    host.change(fail_start={"sglang-a.service": {}})
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.SWITCH_FAILED
    assert store(tmp_path).current_id() is None and store(tmp_path).pending() == latest(tmp_path)["id"]
    failure = latest(tmp_path)["failure"]
    assert "(no diagnosis written; see journalctl -u sglang-a.service)" in failure
    out = capsys.readouterr().out
    assert f"switch to release {latest(tmp_path)['id']} failed: {failure}" in out
    assert "no previous release to revert to" in out


def test_a_diagnosis_older_than_the_start_is_not_blamed(tmp_path, host):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    old = tmp_path / "state" / "diagnoses" / "b-20200101T000000Z-stall.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"summary": "an old stall"}))
    os.utime(old, (1577836800, 1577836800))
    host.change(fail_start={"sglang-b.service": {}})
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_REVERTED
    failure = latest(tmp_path)["failure"]
    assert "an old stall" not in failure and "no diagnosis written" in failure


@pytest.mark.parametrize("age_s, blamed", [(0.5, True), (1.5, False)])
def test_only_a_diagnosis_written_since_the_start_is_blamed(tmp_path, host, monkeypatch, age_s, blamed):
    """A second of slack for the file system's timestamps; older is an earlier start's."""
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    now = 1796038434.0
    monkeypatch.setattr("time.time", lambda: now)  # the switch's start time
    diagnoses = tmp_path / "state" / "diagnoses"
    diagnoses.mkdir(parents=True)
    diagnosis = {"dir": str(diagnoses), "server": "b", "summary": "stalled", "mtime": now - age_s}
    host.change(fail_start={"sglang-b.service": {"diagnosis": diagnosis}})
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_REVERTED
    assert ("diagnosis: stalled" in latest(tmp_path)["failure"]) is blamed


@pytest.mark.parametrize("cause", ["memory", "holder", "nvidia-smi"])
def test_the_new_server_never_starts_while_the_gpus_are_busy(tmp_path, host, agent_env, monkeypatch, cause):
    monkeypatch.setenv("SGLANG_PVE_TEXTFILE_DIR", str(tmp_path / "none"))  # no metrics: count the switch's queries
    assert apply(tmp_path, release(tmp_path, "a", gpu_free_timeout_s=0.5)) == exitcodes.OK
    holder = None
    if cause == "memory":
        host.change(linger=10**6)  # the memory is never released
    elif cause == "holder":
        holder = hold_device(agent_env / "nvidia0", argv_tag="foreign-holder")
    else:
        host.change(smi_error="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    try:
        assert apply(tmp_path, release(tmp_path, "b", "2.0", gpu_free_timeout_s=0.5)) == exitcodes.SWITCH_FAILED
    finally:
        if holder:
            stop(holder)
    assert starts(host, "sglang-b.service") == 0
    if cause == "memory":  # polled, not spun: at most one query per POLL_S within the 0.5 s, per switch
        assert len(host.calls("nvidia-smi")) <= 2 * (0.5 / switch.POLL_S + 2) + 1
    failure = latest(tmp_path)["failure"]
    assert failure.startswith("the GPUs are not free 0.5s after the stop: ")
    expected = {
        "memory": "GPU 0: 81000 MiB used; GPU 1: 81000 MiB used",
        "holder": f"PID {holder.pid if holder else 0} (foreign): ",
        "nvidia-smi": "nvidia-smi failed: ",
    }[cause]
    assert expected in failure
    if cause == "holder":
        assert "foreign-holder" in failure and "[holds " in failure


def test_a_failed_stop_fails_the_switch_and_clears_the_failed_state(tmp_path, host):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    host.change(fail_stop=["sglang-a.service"])
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_FAILED
    assert (
        "systemctl stop sglang-a.service failed: Failed to stop sglang-a.service: Access denied"
        in (latest(tmp_path)["failure"])
    )
    assert ["reset-failed", "sglang-a.service"] in host.calls() and starts(host, "sglang-b.service") == 0


def test_record_only_adopts_without_stopping_or_starting(tmp_path, host):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    calls = len(host.calls())
    assert apply(tmp_path, release(tmp_path, "a", "1.0") | {"commit": "def"}, "--record-only") == exitcodes.OK
    acted = [call for call in host.calls()[calls:] if call[0] != "show"]  # looking is no stop or start
    assert acted == [] and store(tmp_path).current_id() == latest(tmp_path)["id"]
    assert latest(tmp_path)["status"] == "ready"


def ready(tmp_path, server: str, verdict: str = "ready") -> None:
    """What the gate writes once `server` passed it (the fake host runs no gate)."""
    from sglang_pve.agent import spec as spec_module
    from sglang_pve.agent import state

    state.update_status(spec_module.load(str(tmp_path / "specs" / f"{server}.lifecycle.json")), verdict=verdict)


def test_a_release_identical_to_the_ready_current_one_is_adopted_not_restarted(tmp_path, host, capsys):
    """A rerun whose controller decided to apply before the other run's switch ended (it waited
    for the lock meanwhile) finds the same contents ready: no second cold start, no second record."""
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    ready(tmp_path, "a")
    current, calls = store(tmp_path).current_id(), len(host.calls())
    capsys.readouterr()
    assert apply(tmp_path, release(tmp_path, "a") | {"commit": "def", "user": "bob@desk"}) == exitcodes.OK
    assert [call for call in host.calls()[calls:] if call[0] != "show"] == []
    assert store(tmp_path).ids() == [current] and store(tmp_path).current_id() == current
    assert f"release {current} runs these contents already and its server is ready: adopted, not restarted" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize("why", ["not ready", "stopped", "pending", "other venv"])
def test_an_identical_release_is_switched_to_when_its_server_is_not_ready_and_running(tmp_path, host, why):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    ready(tmp_path, "a", "restarting: wedged" if why == "not ready" else "ready")
    spec = release(tmp_path, "a")
    if why == "stopped":
        host.change(units=host.read()["units"] | {"sglang-a.service": {"ActiveState": "failed"}})
    elif why == "pending":
        store(tmp_path).set_pending(store(tmp_path).current_id())  # a killed switch: what runs is unknown
    elif why == "other venv":
        spec["venv"] = str(tmp_path / "venvs" / "elsewhere")
    calls = starts(host, "sglang-a.service")
    assert apply(tmp_path, spec) == exitcodes.OK
    assert starts(host, "sglang-a.service") == calls + 1 and len(store(tmp_path).ids()) == 2


def test_a_release_whose_files_on_disk_are_not_the_rendered_ones_is_refused(tmp_path, host, capsys):
    spec = release(tmp_path, "a")
    (tmp_path / "etc" / "sglang.conf").write_text("another run wrote this\n")
    assert apply(tmp_path, spec) == exitcodes.USAGE
    assert store(tmp_path).ids() == [] and host.calls() == [] and not (tmp_path / "releases" / "blobs").exists()
    err = capsys.readouterr().err
    conf = tmp_path / "etc" / "sglang.conf"
    assert (
        f"the files on disk are not the ones this run rendered: {conf} (rendered {spec['files'][str(conf)][:12]}" in err
    )
    assert "run the deploy again" in err

    (tmp_path / "etc" / "sglang.conf").write_text("active=a version=1.0\n")
    assert apply(tmp_path, spec) == exitcodes.OK
    ready(tmp_path, "a")
    (tmp_path / "etc" / "sglang.conf").write_text("edited by hand\n")
    assert apply(tmp_path, spec) == exitcodes.USAGE  # the same contents, but not on disk: never adopted
    assert len(store(tmp_path).ids()) == 1 and starts(host, "sglang-a.service") == 1


def test_a_release_without_a_server_stops_everything_and_starts_nothing(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    queries = len(host.calls("nvidia-smi"))
    assert apply(tmp_path, release(tmp_path, None, "2.0")) == exitcodes.OK
    assert host.state("sglang-a.service") == "inactive" and starts(host, "sglang-b.service") == 0
    switched = len(host.calls("nvidia-smi"))
    metrics.export(str(tmp_path / "specs"))  # its queries are the only ones the switch made: no wait for GPUs
    assert switched - queries == len(host.calls("nvidia-smi")) - switched
    assert store(tmp_path).current()["active_server"] is None
    assert "runs: no server on SGLang 2.0" in capsys.readouterr().out


def test_switch_to_a_recorded_release_and_prune_the_old_ones(tmp_path, host, capsys):
    for number, server in enumerate("abab"):
        assert apply(tmp_path, release(tmp_path, server, f"{number}.0")) == exitcodes.OK
    ids = store(tmp_path).ids()
    assert cli.main(["switch", "--dir", str(tmp_path / "releases"), "--to", ids[0], "--keep", "2"]) == exitcodes.OK
    assert store(tmp_path).current_id() == ids[0] and host.state("sglang-a.service") == "active"
    assert (tmp_path / "etc" / "sglang.conf").read_text() == "active=a version=0.0\n"
    assert store(tmp_path).ids() == [ids[0], *ids[2:]]  # the newest two and the current one stay
    assert "pruned 1 old release(s)" in capsys.readouterr().out


def test_an_unknown_release_is_refused_before_anything_changes(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    calls = len(host.calls())
    assert cli.main(["switch", "--dir", str(tmp_path / "releases"), "--to", "20990101T000000Z-0"]) == exitcodes.USAGE
    assert host.calls()[calls:] == [] and store(tmp_path).pending() is None
    assert "no release '20990101T000000Z-0'" in capsys.readouterr().err


def test_without_systemctl_or_a_readable_spec_the_switch_fails_with_the_reason(tmp_path, host, monkeypatch):
    spec = release(tmp_path, "a") | {"lifecycle": str(tmp_path / "specs" / "missing.lifecycle.json")}
    assert apply(tmp_path, spec) == exitcodes.SWITCH_FAILED
    assert "missing.lifecycle.json: file not found" in latest(tmp_path)["failure"]
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", "")
    assert apply(tmp_path, release(tmp_path, "a", "2.0")) == exitcodes.SWITCH_FAILED
    assert latest(tmp_path)["failure"] == "systemctl not found"


def test_a_revert_that_hits_a_full_disk_ends_with_one_line_naming_what_runs_and_what_to_do(
    tmp_path, host, monkeypatch, capsys
):
    import errno

    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    previous = store(tmp_path).current_id()
    host.change(fail_start={"sglang-b.service": {}})
    restore = Store.restore

    def full_disk(self, record):
        if record["id"] == previous:  # the revert's restore
            raise OSError(errno.ENOSPC, "No space left on device")
        return restore(self, record)

    monkeypatch.setattr(Store, "restore", full_disk)
    capsys.readouterr()
    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_FAILED
    failed = latest(tmp_path)["id"]
    assert store(tmp_path).pending() == failed and store(tmp_path).current_id() == previous
    [last] = [line for line in capsys.readouterr().out.splitlines() if "failed too" in line]
    assert f"revert to release {previous} failed too: [Errno 28] No space left on device. Runs now: nothing;" in last
    assert f"release {failed} stays pending. Fix: " in last and f"tasks/rollback.py --data to={previous}" in last


def test_a_deploy_clears_the_mark_of_a_bench_that_died_and_says_so(tmp_path, host):
    mark = tmp_path / "bench" / "in-progress.json"
    mark.parent.mkdir()
    mark.write_text(json.dumps({"run_id": "20261201T150000Z-sglang1", "before": "a", "started": "x"}))
    said = []
    code = switch.apply(
        store(tmp_path), release(tmp_path, "a"), lambda text, error=False: said.append(text), bench_mark=str(mark)
    )
    assert code == exitcodes.OK and not mark.exists()
    assert (
        said[0]
        == "bench run 20261201T150000Z-sglang1 died mid-run (a ran before it): "
        + "this deploy runs a, its release's configuration"
    )


def revert(tmp_path, to: str, *extra: str) -> int:
    return cli.main(["revert", "--dir", str(tmp_path / "releases"), "--to", to, *extra])


def test_a_group_ranks_failed_start_is_not_reverted_here_and_stays_pending(tmp_path, host, capsys):
    """--no-revert (a TP group's rank): its group reverts as one (deploy/group_switch.py), so the
    rank neither restarts the old server nor ends the switch: the rerun would switch again."""
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    previous = store(tmp_path).current_id()
    host.change(fail_start={"sglang-b.service": {}})
    capsys.readouterr()
    assert apply(tmp_path, release(tmp_path, "b", "2.0"), "--no-revert") == exitcodes.GROUP_FAILED
    failed = latest(tmp_path)
    assert failed["status"] == "failed" and store(tmp_path).pending() == failed["id"]
    assert store(tmp_path).current_id() == previous
    assert starts(host, "sglang-a.service") == 1 and host.state("sglang-a.service") == "inactive"
    out = capsys.readouterr().out
    assert f"switch to release {failed['id']} failed: " in out and "reverting" not in out
    assert "whose ranks revert together" in out and "switch-timings" in out.splitlines()[-1]


def test_the_groups_revert_runs_what_ran_before_and_ends_the_switch(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    previous = store(tmp_path).current_id()
    host.change(fail_start={"sglang-b.service": {}})
    assert apply(tmp_path, release(tmp_path, "b", "2.0"), "--no-revert") == exitcodes.GROUP_FAILED
    failed = latest(tmp_path)
    capsys.readouterr()
    assert revert(tmp_path, previous, "--why", "TP group tp: rank 1 failed") == exitcodes.OK
    assert store(tmp_path).current_id() == previous and store(tmp_path).pending() is None
    assert (tmp_path / "etc" / "sglang.conf").read_text() == "active=a version=1.0\n"  # its files again
    assert host.state("sglang-a.service") == "active" and starts(host, "sglang-a.service") == 2
    assert "Job for sglang-b.service failed" in store(tmp_path).get(failed["id"])["failure"]  # its own reason stays
    assert f"reverted: release {previous} runs again" in capsys.readouterr().out


def test_a_rank_whose_own_switch_passed_reverts_with_its_group(tmp_path, host):
    """Rank 0 ready on the new release while another rank failed: it goes back too (a group of two
    releases cannot serve), its new release failed with the group's reason, and a rollback goes
    where it went before the switch."""
    for version in ("0.0", "1.0"):
        assert apply(tmp_path, release(tmp_path, "a", version)) == exitcodes.OK
    before, previous = store(tmp_path).previous_id(), store(tmp_path).current_id()
    assert apply(tmp_path, release(tmp_path, "b", "2.0"), "--no-revert") == exitcodes.OK
    new = store(tmp_path).current_id()
    why = "TP group tp: the switch failed on sglang5"
    assert revert(tmp_path, previous, "--previous", before, "--why", why) == exitcodes.OK
    assert store(tmp_path).current_id() == previous and store(tmp_path).previous_id() == before
    assert (store(tmp_path).get(new)["status"], store(tmp_path).get(new)["failure"]) == ("failed", why)
    assert host.state("sglang-a.service") == "active" and host.state("sglang-b.service") == "inactive"


def test_a_revert_that_fails_says_so_and_leaves_the_switch_pending(tmp_path, host, capsys):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    previous = store(tmp_path).current_id()
    host.change(fail_start={unit: {} for unit in UNITS})
    assert apply(tmp_path, release(tmp_path, "b", "2.0"), "--no-revert") == exitcodes.GROUP_FAILED
    capsys.readouterr()
    assert revert(tmp_path, previous) == exitcodes.SWITCH_FAILED
    assert store(tmp_path).pending() == latest(tmp_path)["id"]  # what runs is unknown: the rerun switches
    assert f"revert to release {previous} failed: Job for sglang-a.service failed" in capsys.readouterr().out


@pytest.mark.parametrize(("verdict", "ready_"), [("ready", True), ("restarting: wedged", False)])
def test_the_releases_report_says_whether_the_current_server_is_ready(tmp_path, host, verdict, ready_):
    """What a TP group's controller reads to adopt what runs on every rank (deploy/group_switch.py)."""
    assert json.loads(_releases(tmp_path))["ready"] is False  # no release yet
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    ready(tmp_path, "a", verdict)
    assert json.loads(_releases(tmp_path))["ready"] is ready_
    host.change(units=host.read()["units"] | {"sglang-a.service": {"ActiveState": "failed"}})
    assert json.loads(_releases(tmp_path))["ready"] is False
