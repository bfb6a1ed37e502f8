"""The agent's metrics file (metrics.py): values from the real state, checked by promtool."""

import os
import shutil
import subprocess
import threading
import time

import pytest

from sglang_pve.agent import diagnosis, exitcodes, metrics, restarts, state, switch_history, watchdog
from tests.unit.agent_support import (
    BASELINE_V059,
    FakeHost,
    HealthServer,
    fake_systemctl,
    messages,
    sleeper,
    stop,
    write_spec,
)
from tests.unit.test_agent_switch import apply, release, store

pytestmark = pytest.mark.usefixtures("agent_env")

PROMTOOL = shutil.which("promtool")  # Debian's prometheus package (Makefile SYSTEM_PACKAGES)
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: apt-get install prometheus")


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value of every sample in the exposition text."""
    rows = [line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")]
    return {key: float(value) for key, value in rows}


def written(tmp_path) -> str:
    return (tmp_path / "node-exporter" / metrics.FILE_NAME).read_text()


def _until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def lint(text: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


@pytest.fixture
def host(tmp_path, monkeypatch):
    return FakeHost(tmp_path, monkeypatch)


def test_a_ready_server_a_stalled_one_and_the_gpus_as_metrics(tmp_path, host):
    ready = write_spec(tmp_path, server="baseline")
    stalled = write_spec(tmp_path, server="eagle3", stall_timeout_s={"weights": 1})
    write_spec(tmp_path, server="spare")
    (tmp_path / "log" / "baseline.log").write_text("\n".join(BASELINE_V059) + "\n")
    state.update_status(ready, ready_at=time.time() - 60)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - 30))
    (tmp_path / "log" / "eagle3.log").write_text(f"[{stamp} TP0] Load weight begin. avail mem=93.46 GB\n")
    restarts.record(stalled)
    restarts.record(stalled)
    record = diagnosis.collect(stalled, "stall", "stalled", phase="weights", seconds_in_phase=30, seconds_stalled=30)
    path = diagnosis.save(stalled, record)
    units = host.read()["units"]
    units["sglang-baseline.service"] = {"ActiveState": "active", "SubState": "running", "MainPID": "4242"}
    units["sglang-eagle3.service"] = {"ActiveState": "activating", "SubState": "start-post"}
    host.change(units=units)

    with HealthServer(ready.port, {"/health": [200]}):
        assert metrics.export(str(tmp_path / "specs")) is None
    values = samples(written(tmp_path))

    assert values['sglang_pve_server_ready{server="baseline"}'] == 1
    assert values['sglang_pve_server_ready{server="eagle3"}'] == 0
    assert values['sglang_pve_server_ready{server="spare"}'] == 0
    assert values['sglang_pve_server_verdict{server="eagle3",verdict="stalled"}'] == 1
    assert values['sglang_pve_server_verdict{server="eagle3",verdict="starting"}'] == 0
    assert values['sglang_pve_server_verdict{server="spare",verdict="stopped"}'] == 1
    assert values['sglang_pve_server_phase{server="eagle3",phase="weights"}'] == 1
    assert values['sglang_pve_server_phase{server="baseline",phase="ready"}'] == 1
    assert 55 <= values['sglang_pve_server_phase_seconds{server="baseline"}'] < 600
    assert values['sglang_pve_server_seconds_since_progress{server="eagle3"}'] >= 29
    assert values['sglang_pve_server_restarts_total{server="eagle3"}'] == 2
    assert values['sglang_pve_server_restarts_in_window{server="eagle3"}'] == 2
    assert values['sglang_pve_server_restarts_max{server="eagle3"}'] == 2
    assert values['sglang_pve_server_restarts_total{server="baseline"}'] == 0
    stall = 'sglang_pve_server_diagnosis_timestamp_seconds{server="eagle3",kind="stall"}'
    assert values[stall] == pytest.approx(os.path.getmtime(path))
    assert values['sglang_pve_gpu_memory_used_bytes{gpu="0"}'] == 81000 * 2**20  # fake_host.py: a unit runs
    assert values['sglang_pve_gpu_holders{ours="false"}'] == 0


def test_restarts_total_counts_past_the_window_and_starts_over_with_a_new_release(tmp_path, host):
    spec = write_spec(tmp_path, server="baseline", watchdog={"window_s": 1})
    restarts.record(spec, restarts.Moment("", 0.0, 0.0))  # long ago: the next record prunes it, still counted
    restarts.record(spec)
    assert len(restarts.history(spec)) == 1 and restarts.total(spec) == 2
    (tmp_path / "releases").mkdir(exist_ok=True)
    (tmp_path / "releases" / "current").write_text("20261201T000000Z-00000000\n")
    assert restarts.total(spec) == 0


def test_a_reverted_switch_is_counted_and_names_the_release_that_runs(tmp_path, host):
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    first = store(tmp_path).current_id()
    values = samples(written(tmp_path))
    assert values['sglang_pve_switches_total{result="ready"}'] == 1
    assert values["sglang_pve_switch_reverts_total"] == 0
    host.change(fail_start={"sglang-b.service": {}})

    assert apply(tmp_path, release(tmp_path, "b", "2.0")) == exitcodes.SWITCH_REVERTED
    text = written(tmp_path)
    values = samples(text)
    assert values['sglang_pve_switches_total{result="ready"}'] == 1
    assert values['sglang_pve_switches_total{result="reverted"}'] == 1
    assert values["sglang_pve_switch_reverts_total"] == 1
    assert values['sglang_pve_switch_last_timestamp_seconds{result="reverted"}'] == pytest.approx(time.time(), abs=60)
    assert values['sglang_pve_switch_last_duration_seconds{step="total_s"}'] > 0
    assert values[f'sglang_pve_release_info{{release="{first}",server="a",sglang_version="1.0"}}'] == 1


def test_a_metrics_file_that_cannot_be_written_is_said_not_raised(tmp_path):
    write_spec(tmp_path, server="baseline")
    (tmp_path / "node-exporter" / metrics.FILE_NAME).mkdir()  # the rename over it fails
    assert (metrics.export(str(tmp_path / "specs")) or "").startswith("metrics not written: IsADirectoryError")


def test_without_node_exporters_directory_nothing_is_written_or_made(tmp_path, monkeypatch):
    write_spec(tmp_path, server="baseline")
    monkeypatch.setenv("SGLANG_PVE_TEXTFILE_DIR", str(tmp_path / "var" / "node-exporter"))
    assert metrics.export(str(tmp_path / "specs")) is None and not (tmp_path / "var").exists()


def test_label_values_are_escaped():
    history = switch_history.read("/nonexistent")
    text = metrics.render({"servers": [], "gpus": [], "holders": []}, {"id": 'a"b\\c\nd'}, history)
    assert 'release="a\\"b\\\\c\\nd"' in text


@needs_promtool
def test_promtool_finds_no_problem_in_the_metrics(tmp_path, host):
    write_spec(tmp_path, server="baseline")
    assert apply(tmp_path, release(tmp_path, "a")) == exitcodes.OK
    checked = lint(written(tmp_path))
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked.stdout + checked.stderr


@needs_promtool
def test_promtool_catches_a_misnamed_metric():
    """The linter run above really checks: a counter without _total fails it."""
    checked = lint("# HELP sglang_pve_restarts Restarts.\n# TYPE sglang_pve_restarts counter\nsglang_pve_restarts 1\n")
    assert checked.returncode != 0 and "_total" in checked.stdout + checked.stderr


def test_the_watchdog_writes_the_metrics_of_its_server_while_it_watches(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, server="baseline")
    main = sleeper()
    monkeypatch.setattr(metrics, "INTERVAL_S", 0.0)
    monkeypatch.setenv(
        "SGLANG_PVE_SYSTEMCTL",
        str(fake_systemctl(tmp_path, {"sglang-baseline.service": {"ActiveState": "active", "MainPID": str(main.pid)}})),
    )
    # The test ends the "server" by its PID once the file is there (written by rename), or after 60 s
    # (the assert below then fails): not at a fixed time, which under load can come before the write.
    path = tmp_path / "node-exporter" / metrics.FILE_NAME
    ender = threading.Thread(target=lambda: (_until(path.exists, 60.0), main.kill()), daemon=True)
    ender.start()
    try:
        with HealthServer(spec.port, {"/health_generate": [200], "/health": [200]}):
            assert watchdog.run(spec, main.pid, messages(), tick_s=0.01) == exitcodes.OK
    finally:
        stop(main)
        ender.join()
    assert samples(written(tmp_path))['sglang_pve_server_ready{server="baseline"}'] == 1
