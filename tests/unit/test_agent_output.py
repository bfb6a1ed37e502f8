"""The agent's own lines: tagged, written once even where stdout already is the server log,
recognised by the followers; diagnoses carry py-spy stacks of our processes when it exists."""

import io
import json
import os
import sys

import pytest

from sglang_pve.agent import diagnosis
from sglang_pve.agent.output import Reporter, is_own
from tests.unit.agent_support import hold_device, sleeper, stop, write_spec

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd


def test_lines_are_tagged_and_go_to_the_log_once(tmp_path):
    log = tmp_path / "server.log"
    with open(log, "a") as as_under_the_unit:  # StandardOutput=append:LOG
        Reporter("prestart", as_under_the_unit, log=str(log))("GPUs free")
    stream = io.StringIO()
    Reporter("poststop", stream, log=str(log))("two\nlines")
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and all(is_own(line) for line in lines)
    assert lines[0].endswith("sglang-pve prestart] GPUs free") and lines[2].endswith("sglang-pve poststop] lines")
    assert stream.getvalue().splitlines() == lines[1:]
    assert not is_own("[2026-07-20 10:00:00 TP0] Load weight begin.")


def test_a_half_drawn_tqdm_bar_does_not_swallow_the_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\rCapturing batches (bs=8 avail_mem=9.90 GB):  40%|####      | 21/52")
    with open(log, "a") as as_under_the_unit:
        Reporter("gate", as_under_the_unit, log=str(log))("phase kv_cache -> cuda_graph")
    lines = log.read_bytes().decode().split("\n")
    assert lines[0].endswith("21/52") and is_own(lines[1]) and lines[2] == ""


def test_diagnosis_has_py_spy_stacks_of_our_holders_and_the_main_pid(tmp_path, monkeypatch, agent_env):
    fake = tmp_path / "bin" / "py-spy"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "Thread $3 (idle): \\"MainThread\\""\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    spec = write_spec(tmp_path)
    main = sleeper()
    ours = hold_device(agent_env / "nvidia0", unit="sglang-t1.service")
    foreign = hold_device(agent_env / "nvidia1")
    try:
        path = diagnosis.save(
            spec,
            diagnosis.collect(
                spec, "wedged", "wedged: test", phase="ready", seconds_in_phase=5, seconds_stalled=3, main_pid=main.pid
            ),
        )
    finally:
        for child in (main, ours, foreign):
            stop(child)
    record = json.loads(open(path).read())
    assert set(record["py_spy"]) == {str(main.pid), str(ours.pid)}
    assert record["py_spy"][str(ours.pid)].startswith(f"Thread {ours.pid} (idle)")
    assert {(h["pid"], h["ours"]) for h in record["holders"]} == {(ours.pid, True), (foreign.pid, False)}
    assert os.path.basename(path).startswith("t1-") and path.endswith("-wedged.json")
    assert diagnosis.latest(spec) == path


def test_a_hanging_py_spy_is_cut_off(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "py-spy"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport time; print('partial', flush=True); time.sleep(60)\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    dumps = diagnosis.dump_stacks([os.getpid()], timeout_s=0.5)
    assert "did not finish within 0.5s" in dumps[str(os.getpid())]


def test_diagnoses_in_the_same_second_get_distinct_names(tmp_path):
    spec = write_spec(tmp_path)
    paths = [
        diagnosis.save(
            spec, diagnosis.collect(spec, kind, kind, phase="weights", seconds_in_phase=1, seconds_stalled=1)
        )
        for kind in ("wedged", "restart_cap", "wedged")
    ]
    assert len(set(paths)) == 3
    assert diagnosis.latest(spec) == paths[-1]
