"""Holders of the (fake) device nodes: real child processes holding a temp file open with O_PATH,
ours when their environment carries SGLANG_PVE_UNIT=sglang-..."""

import json
import os
import subprocess
import sys
import time

import pytest

from sglang_pve.agent import holders, procs
from sglang_pve.agent.cli import main
from tests.unit.agent_support import hold_device, recorded_sleeps, stop

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd


def test_scan_finds_holders_and_tells_ours_from_foreign(agent_env):
    ours = hold_device(agent_env / "nvidia0", unit="sglang-baseline.service", argv_tag="ours-tag")
    foreign = hold_device(agent_env / "nvidiactl", argv_tag="foreign-tag")
    other_prefix = hold_device(agent_env / "nvidia1", unit="vllm-x.service")
    (agent_env / "not-a-gpu").touch()
    bystander = hold_device(agent_env / "not-a-gpu", unit="sglang-baseline.service")
    try:
        found = {h.pid: h for h in holders.scan("sglang-")}
        assert set(found) == {ours.pid, foreign.pid, other_prefix.pid}
        assert found[ours.pid].ours and found[ours.pid].unit == "sglang-baseline.service"
        assert found[ours.pid].devices == (str(agent_env / "nvidia0"),)
        assert "ours-tag" in found[ours.pid].cmdline
        assert not found[foreign.pid].ours and found[foreign.pid].unit is None
        assert "foreign-tag" in found[foreign.pid].cmdline
        assert not found[other_prefix.pid].ours
    finally:
        for child in (ours, foreign, other_prefix, bystander):
            stop(child)


def test_a_holder_lists_each_device_once_sorted_and_its_whole_command_line(agent_env):
    """What `fuser -v /dev/nvidia*` shows per process: every device it holds (a device opened twice
    once), and the command line with its arguments."""
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (agent_env / name).touch()
    code = (
        "import os, sys, time\n"
        "fds = [os.open(p, os.O_PATH) for p in sys.argv[1:4]]\n"
        "print('holding', flush=True)\n"
        "time.sleep(120)\n"
    )
    paths = [str(agent_env / name) for name in ("nvidiactl", "nvidia0", "nvidiactl")]
    child = subprocess.Popen(
        [sys.executable, "-c", code, *paths, "rogue.py", "--gpus", "8"], stdout=subprocess.PIPE, text=True
    )
    uvm = hold_device(agent_env / "nvidia-uvm")
    try:
        assert child.stdout.readline().strip() == "holding"
        found = {h.pid: h for h in holders.scan("sglang-")}
        assert set(found) == {child.pid, uvm.pid}
        assert found[child.pid].devices == (str(agent_env / "nvidia0"), str(agent_env / "nvidiactl"))
        assert found[child.pid].cmdline.endswith(f"{paths[-1]} rogue.py --gpus 8")  # no NUL, no trailing space
        assert found[uvm.pid].devices == (str(agent_env / "nvidia-uvm"),)
    finally:
        stop(child)
        stop(uvm)


def test_scan_skips_the_agent_itself_and_gone_processes(agent_env):
    fd = os.open(agent_env / "nvidia0", os.O_CREAT | os.O_RDONLY)
    child = hold_device(agent_env / "nvidia1", unit="sglang-t1.service")
    try:
        assert [h.pid for h in holders.scan("sglang-")] == [child.pid]  # not this test process
        stop(child)
        assert holders.scan("sglang-") == []
    finally:
        os.close(fd)
        stop(child)


def test_alive_checks_the_start_time_so_a_reused_pid_is_not_the_same_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = procs.identify(child.pid)
        assert procs.alive(proc)
        assert not procs.alive(procs.Proc(child.pid, proc.start + 1))
    finally:
        stop(child)
    assert not procs.alive(proc)


def test_terminate_escalates_to_sigkill_by_pid(agent_env, monkeypatch):
    stubborn = hold_device(agent_env / "nvidia0", unit="sglang-t1.service", ignore_term=True)
    slept = recorded_sleeps(procs, monkeypatch, time.sleep)  # slept too: the processes die in real time
    survivors = procs.terminate([procs.identify(stubborn.pid)], grace_s=0.3, kill_wait_s=5)
    assert survivors == []
    assert stubborn.wait(timeout=5) == -9
    assert sum(slept) <= 0.3 + 5 + 2 * 0.05  # each wait within its bound and one poll: asked, never timed


def test_holders_command_prints_json(agent_env, capsys):
    child = hold_device(agent_env / "nvidia0", unit="sglang-t1.service")
    try:
        assert main(["holders"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert listed == [
            {
                "pid": child.pid,
                "cmdline": listed[0]["cmdline"],
                "devices": [str(agent_env / "nvidia0")],
                "ours": True,
                "unit": "sglang-t1.service",
            }
        ]
    finally:
        stop(child)
