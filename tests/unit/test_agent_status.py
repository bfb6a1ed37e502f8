"""`status --json`: every verdict, from one systemctl call, the logs and the state files."""

import json
import os
import re
import time

import pytest

from sglang_pve.agent import diagnosis, state, status
from sglang_pve.agent.cli import main
from sglang_pve.agent.logfollow import size
from sglang_pve.deploy import progress
from sglang_pve.tools.status_render import render
from tests.unit.agent_support import (
    BASELINE_V059,
    HealthServer,
    append,
    fake_nvidia_smi,
    fake_systemctl,
    systemctl_calls,
    write_spec,
)

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd


def monotonic_usec(seconds_ago: float) -> str:
    return str(int((time.monotonic() - seconds_ago) * 1e6))


def started_with(spec, lines, seconds_ago=0.0):
    """The log of an older run, then this start's lines; the offset between them."""
    append(spec.log, "old run\n")
    state.write_offset(spec, size(spec.log))
    append(spec.log, "".join(line + "\n" for line in lines))
    if seconds_ago:
        os.utime(spec.log, (time.time() - seconds_ago, time.time() - seconds_ago))


def local_stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def seconds_in(verdict: str, pattern: str) -> int:
    match = re.fullmatch(pattern, verdict)
    assert match, verdict
    return int(match.group(1))


def test_every_verdict_from_one_systemctl_call(tmp_path, monkeypatch):
    began = time.time()  # the stamps below are relative to when they are written; a loaded machine is slow
    stall = {"weights": 600, "cuda_graph": 30, "warmup": 30}
    ready = write_spec(tmp_path, server="ready")
    starting = write_spec(tmp_path, server="starting", stall_timeout_s=stall)
    stalled = write_spec(tmp_path, server="stalled", stall_timeout_s=stall)
    zombie = write_spec(tmp_path, server="zombie")
    failed = write_spec(tmp_path, server="failed")
    crashed = write_spec(tmp_path, server="crashed")
    died = write_spec(tmp_path, server="died")
    refused = write_spec(tmp_path, server="refused")
    write_spec(tmp_path, server="pre")
    write_spec(tmp_path, server="stopped")
    write_spec(tmp_path, server="queued")
    (tmp_path / "specs" / "broken.lifecycle.json").write_text("{}")

    started_with(ready, BASELINE_V059)
    state.update_status(ready, ready_at=time.time() - 60)
    hour_ago = time.time() - 3600
    started_with(
        starting,
        [
            f"[{local_stamp(time.time() - 42)} TP0] Load weight begin. avail mem=93.46 GB",
            "\rMulti-thread loading shards:  40% Completed | 26/64",
        ],
    )
    # a hung warm-up while status/monitoring probes keep writing access lines: those are no progress
    started_with(
        stalled,
        BASELINE_V059[:20]
        + [
            f"[{local_stamp(time.time() - 100)} TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0",
            f'[{local_stamp(time.time())}] INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 503',
        ],
    )
    started_with(
        zombie,
        BASELINE_V059
        + [
            f"[{local_stamp(hour_ago)} TP0] Decode batch, #running-req: 1, gen throughput (token/s): 80.1",
            '[2026-07-20 10:00:00] INFO:     127.0.0.1:5 - "GET /health_generate HTTP/1.1" 503',
        ],
    )
    state.update_status(zombie, watchdog={"failures": 2, "failing_since": hour_ago + 60})
    started_with(failed, BASELINE_V059[:15])
    path = diagnosis.save(
        failed,
        diagnosis.collect(
            failed,
            "stall",
            "stalled in cuda_graph: no log progress for 1200s (limit 1200s)",
            phase="cuda_graph",
            seconds_in_phase=1260,
            seconds_stalled=1200,
        ),
    )
    started_with(crashed, BASELINE_V059[:5])
    started_with(
        died,
        BASELINE_V059
        + [
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in f',
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ],
    )
    started_with(refused, [])
    state.update_status(refused, verdict="failed: GPUs held by other processes (prestart refused)")
    monkeypatch.setenv(
        "SGLANG_PVE_SYSTEMCTL",
        str(
            fake_systemctl(
                tmp_path,
                {
                    "sglang-ready.service": {
                        "ActiveState": "active",
                        "SubState": "running",
                        "Result": "success",
                        "MainPID": "4242",
                    },
                    "sglang-starting.service": {
                        "ActiveState": "activating",
                        "SubState": "start-post",
                        "ExecMainStartTimestampMonotonic": monotonic_usec(50),
                    },
                    "sglang-stalled.service": {
                        "ActiveState": "activating",
                        "SubState": "start-post",
                        "ExecMainStartTimestampMonotonic": monotonic_usec(400),
                    },
                    "sglang-zombie.service": {"ActiveState": "active", "SubState": "running", "MainPID": "4343"},
                    "sglang-failed.service": {
                        "ActiveState": "failed",
                        "SubState": "failed",
                        "Result": "exit-code",
                        "ExecMainStartTimestampMonotonic": monotonic_usec(30),
                    },
                    "sglang-crashed.service": {
                        "ActiveState": "failed",
                        "SubState": "failed",
                        "Result": "signal",
                        "ExecMainStartTimestampMonotonic": monotonic_usec(5),
                    },
                    "sglang-died.service": {
                        "ActiveState": "failed",
                        "Result": "exit-code",
                        "ExecMainStartTimestampMonotonic": monotonic_usec(900),
                    },
                    "sglang-refused.service": {
                        "ActiveState": "failed",
                        "Result": "exit-code",
                        "ExecMainStartTimestampMonotonic": monotonic_usec(900),
                    },
                    "sglang-pre.service": {
                        "ActiveState": "activating",
                        "SubState": "start-pre",
                        "InactiveExitTimestampMonotonic": monotonic_usec(12),
                    },
                    # at boot: its start waits for network-online.target (systemd 252's show)
                    "sglang-queued.service": {"ActiveState": "inactive", "SubState": "dead", "Job": "139"},
                },
            )
        ),
    )
    monkeypatch.setenv(
        "SGLANG_PVE_NVIDIA_SMI", str(fake_nvidia_smi(tmp_path, "0, GPU-a, NVIDIA H200, 80211, 143771, 0\n"))
    )

    with HealthServer(ready.port, {"/health": [200]}):
        report = status.collect(str(tmp_path / "specs"))

    shows = [call for call in systemctl_calls(tmp_path) if call[0] == "show"]
    assert len(shows) == 1 and len([a for a in shows[0] if a.endswith(".service")]) == 11
    by_name = {entry.get("server"): entry for entry in report["servers"]}
    assert by_name["ready"]["verdict"] == "ready" and by_name["ready"]["health"]["status"] == 200
    assert by_name["ready"]["phase"] == "ready" and by_name["ready"]["seconds_in_phase"] >= 59
    late = int(time.time() - began) + 1
    assert 41 <= seconds_in(by_name["starting"]["verdict"], r"starting \(weights, (\d+)s.*") <= 42 + late
    assert by_name["starting"]["last_log_line"] == "Multi-thread loading shards:  40% Completed | 26/64"
    assert 99 <= seconds_in(by_name["stalled"]["verdict"], r"stalled \(warmup, no progress for (\d+)s\)") <= 100 + late
    assert (
        by_name["zombie"]["verdict"]
        == f"zombie since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(hour_ago + 60))}"
    )
    assert by_name["zombie"]["health"] is None  # port closed: not probed
    assert by_name["failed"]["verdict"] == "failed: stalled in cuda_graph: no log progress for 1200s (limit 1200s)"
    assert by_name["failed"]["diagnosis"] == path and by_name["failed"]["phase"] == "cuda_graph"
    assert by_name["crashed"]["verdict"] == "failed: unit result signal"
    assert by_name["died"]["verdict"] == (
        "failed: unit result exit-code; log: RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert by_name["refused"]["verdict"] == "failed: GPUs held by other processes (prestart refused)"
    assert 12 <= seconds_in(by_name["pre"]["verdict"], r"starting \(prestart, (\d+)s.*") <= 12 + late
    assert by_name["stopped"]["verdict"] == "stopped"
    assert by_name["queued"]["verdict"] == "start queued (job 139, waiting for the units it starts after)"
    assert by_name[None]["error"].startswith(f"spec {tmp_path}/specs/broken.lifecycle.json: missing key(s)")
    assert report["gpus"][0]["memory_used_mib"] == 80211 and report["unit_error"] is None


def test_active_but_unhealthy_with_a_busy_log_is_still_ready(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, watchdog={"interval_s": 30})
    started_with(
        spec, BASELINE_V059 + [f"[{local_stamp(time.time())} TP0] Decode batch, #running-req: 48, #queue-req: 9"]
    )
    monkeypatch.setenv(
        "SGLANG_PVE_SYSTEMCTL",
        str(fake_systemctl(tmp_path, {"sglang-t1.service": {"ActiveState": "active", "SubState": "running"}})),
    )
    with HealthServer(spec.port, {"/health": [503]}):
        entry = status.collect(str(tmp_path / "specs"))["servers"][0]
    assert entry["health"]["status"] == 503 and entry["verdict"] == "ready"


def test_status_command_prints_one_json_document(tmp_path, capsys):
    write_spec(tmp_path)
    assert main(["status", "--json", "--spec-dir", str(tmp_path / "specs")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["servers"][0]["verdict"] == "stopped" and report["gpus"] is None
    assert report["device_nodes"] == [] and isinstance(report["device_majors"], dict)
    assert main(["status", "--spec-dir", str(tmp_path / "specs")]) == 0
    assert "sglang-t1.service" in capsys.readouterr().out


def test_a_start_past_its_ready_line_reads_gate_until_the_gate_passes_then_ready(tmp_path, monkeypatch):
    """The ready line is SGLang's; ready is the gate's word (its /health 200). In between a status read
    once said `ready 2 s, starting (ready, 2s)`: now phase gate while the gate checks, and ready with
    verdict ready once it recorded the pass (the unit still activating while the gate process exits)."""
    confirming, passed, earlier = (write_spec(tmp_path, server=name) for name in ("confirming", "passed", "earlier"))
    for spec in (confirming, passed, earlier):
        started_with(spec, BASELINE_V059[:-1] + [f"[{local_stamp(time.time() - 2)}] {BASELINE_V059[-1][22:]}"])
    state.update_status(passed, verdict="ready", ready_at=time.time() - 1)
    state.update_status(earlier, verdict="ready", ready_at=time.time() - 3600)  # a start before this one
    activating = {"ActiveState": "activating", "SubState": "start-post"}
    monkeypatch.setenv(
        "SGLANG_PVE_SYSTEMCTL",
        str(
            fake_systemctl(
                tmp_path,
                {
                    f"sglang-{name}.service": {**activating, "ExecMainStartTimestampMonotonic": monotonic_usec(60)}
                    for name in ("confirming", "passed", "earlier")
                },
            )
        ),
    )
    report = status.collect(str(tmp_path / "specs"))
    by_name = {entry["server"]: entry for entry in report["servers"]}
    for name in ("confirming", "earlier"):
        assert by_name[name]["phase"] == "gate", by_name[name]
        assert re.fullmatch(
            r"starting \(gate: ready line seen, /health not confirmed yet, \d+s\)", by_name[name]["verdict"]
        )
    assert (by_name["passed"]["phase"], by_name["passed"]["verdict"]) == ("ready", "ready")
    assert by_name["passed"]["seconds_in_phase"] < 600  # since the gate's ready_at, not the hour-old one's
    # as the deploy's progress line and the status table render them: one word each, not two
    assert re.match(r"progress: passed ready \d+ s, ready; last: ", progress.line("passed", report))
    assert re.match(r"progress: confirming gate \d+ s, starting \(gate: ", progress.line("confirming", report))
    row = next(line for line in render("sglang1", report).splitlines() if line.strip().startswith("passed "))
    assert re.search(r"activating/start-post +ready +0m\d\ds .* ready$", row), row


def test_a_start_the_gate_failed_reads_failed_while_the_unit_still_activates(tmp_path, monkeypatch):
    """The gate wrote its verdict, then kills the server: a dying server's last lines are fresh output,
    which read as `starting` until systemd called the unit failed. An earlier start's failure does not
    count for this one."""
    failing, earlier = (write_spec(tmp_path, server=name) for name in ("failing", "earlier"))
    for spec in (failing, earlier):
        started_with(spec, BASELINE_V059[:3] + ["/usr/lib/python3.11/multiprocessing/resource_tracker.py: warning"])
    summary = "stalled in weights: no log progress for 600s (limit 600s), 610s after start"
    state.update_status(failing, verdict=f"failed: {summary}", failed_at=time.time() - 1)
    state.update_status(earlier, verdict=f"failed: {summary}", failed_at=time.time() - 3600)
    activating = {"ActiveState": "activating", "SubState": "start-post"}
    units = {
        f"sglang-{name}.service": {**activating, "ExecMainStartTimestampMonotonic": monotonic_usec(610)}
        for name in ("failing", "earlier")
    }
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, units)))
    by_name = {entry["server"]: entry for entry in status.collect(str(tmp_path / "specs"))["servers"]}
    assert by_name["failing"]["verdict"] == f"failed: {summary}"
    assert by_name["earlier"]["verdict"].startswith("starting ("), by_name["earlier"]
