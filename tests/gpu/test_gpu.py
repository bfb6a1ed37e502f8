"""The GPU facts and the reaper against a real NVIDIA GPU: real nvidia-smi output, real device
majors, and a real CUDA process holding memory that the agent kills by PID (or refuses to).

Runs on the device machine (stdlib agent + PyTorch only):  python3 -m pytest tests/gpu -v
Set SGLANG_PVE_CAPTURE_DIR to also save the raw outputs as unit-test fixtures.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_pve.agent import gpus
from sglang_pve.agent.zipapp import build
from tests.gpu.specs import UNIT, agent_spec, write

HOLD_GIB = 8
CUDA_HOLDER = (
    "import sys, time, torch\n"
    f"x = torch.empty({HOLD_GIB} << 30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()\n"
    "print('holding', flush=True); time.sleep(600)\n"
)


def _capture(name: str, text: str) -> None:
    directory = os.environ.get("SGLANG_PVE_CAPTURE_DIR")
    if directory:
        Path(directory, name).write_text(text)


def _smi_csv() -> str:
    return subprocess.run(
        ["nvidia-smi", f"--query-gpu={gpus.QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _used_mib(index: int = 0) -> int:
    return next(g.memory_used_mib for g in gpus.parse_gpu_csv(_smi_csv()) if g.index == index)


def test_real_nvidia_smi_output_parses():
    text = _smi_csv()
    _capture("nvidia-smi-query.csv", text)
    parsed = gpus.parse_gpu_csv(text)
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    assert len(parsed) == listed.count("GPU ") > 0
    for gpu in parsed:
        assert gpu.uuid.startswith("GPU-") and gpu.memory_total_mib > 10_000
        assert 0 <= gpu.memory_used_mib <= gpu.memory_total_mib and gpu.utilization_pct is not None


def test_device_majors_come_from_proc_devices():
    text = Path("/proc/devices").read_text()
    _capture("proc-devices.txt", text)
    majors = gpus.parse_proc_devices(text)
    nodes = {node.path: node for node in gpus.device_nodes()}
    _capture("device-nodes.txt", "".join(f"{n.path} {n.major} {n.minor}\n" for n in nodes.values()))
    assert nodes["/dev/nvidia0"].major == majors["nvidia"] and nodes["/dev/nvidiactl"].minor == 255
    if "/dev/nvidia-uvm" in nodes:
        assert nodes["/dev/nvidia-uvm"].major == majors["nvidia-uvm"]
    version = Path("/proc/driver/nvidia/version").read_text() if Path("/proc/driver/nvidia/version").exists() else ""
    _capture("driver-version.txt", version)
    smi_driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert gpus.parse_driver_version(version or smi_driver) == smi_driver


@pytest.fixture
def agent(tmp_path):
    """The agent zipapp exactly as deployed, with a spec for a unit `sglang-gputest.service`."""
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(build())
    systemctl = tmp_path / "systemctl"  # no systemd here: every unit reads as inactive
    systemctl.write_text("#!/bin/sh\necho ActiveState=inactive\n")
    systemctl.chmod(0o755)
    spec_file = write(tmp_path / "spec.json", agent_spec(tmp_path))  # the contract's defaults (specs.py)

    def run(command: str) -> subprocess.CompletedProcess:
        env = os.environ | {"SGLANG_PVE_SYSTEMCTL": str(systemctl)}
        return subprocess.run(
            [sys.executable, str(pyz), command, "--spec", str(spec_file)],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )

    return run


def _hold_gpu(ours: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_PVE_UNIT"}
    if ours:
        env["SGLANG_PVE_UNIT"] = UNIT
    holder = subprocess.Popen(
        [sys.executable, "-c", CUDA_HOLDER], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_prestart_kills_our_stale_cuda_holder_by_pid_and_memory_returns_to_idle(agent):
    idle = _used_mib()
    holder = _hold_gpu(ours=True)
    try:
        assert _used_mib() >= idle + HOLD_GIB * 1024 * 0.9
        started = time.monotonic()
        result = agent("prestart")
        freed_after = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{holder.pid}" in result.stdout + result.stderr  # named by PID
        assert holder.wait(timeout=5) in (-signal.SIGTERM, -signal.SIGKILL)
        assert _used_mib() <= idle + 1024
        print(f"stale holder of {HOLD_GIB} GiB reaped, memory idle after {freed_after:.1f}s")
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)


def test_prestart_refuses_a_foreign_holder_and_leaves_it_alone(agent):
    holder = _hold_gpu(ours=False)
    try:
        result = agent("prestart")
        assert result.returncode == 3, result.stdout + result.stderr
        message = result.stdout + result.stderr
        assert f"PID {holder.pid}" in message or f"{holder.pid}" in message
        assert "torch" in message or "python" in message  # the command line is named
        assert holder.poll() is None  # never killed: not ours
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
