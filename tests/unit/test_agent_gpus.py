"""Pure parsers of nvidia-smi, /proc/devices and the driver version; the I/O wrappers with a fake
nvidia-smi and a fake /proc."""

import os
import stat
from pathlib import Path

import pytest

from sglang_pve.agent import gpus
from tests.unit.agent_support import fake_nvidia_smi

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd

SMI_CSV = """\
0, GPU-5a1e0c3b-8f7d-4a51-9d1e-0b6f2c9a7e11, NVIDIA RTX PRO 6000 Blackwell Server Edition, 80211, 97887, 0
1, GPU-6b2f1d4c-9a8e-4b62-8e2f-1c7a3d0b8f22, NVIDIA RTX PRO 6000 Blackwell Server Edition, 3, 97887, 100
2, GPU-7c3a2e5d-0b9f-4c73-9f3a-2d8b4e1c9a33, NVIDIA H200, [N/A], 143771, [Not Supported]
"""

PROC_DEVICES = """\
Character devices:
  1 mem
  4 /dev/vc/0
  5 /dev/tty
195 nvidia
195 nvidia-modeset
226 drm
234 nvidia-nvswitch
237 nvidia-caps
238 nvidia-caps-imex-channels
510 nvidia-uvm

Block devices:
  7 loop
259 blkext
"""


def test_parse_gpu_csv_handles_na_and_not_supported():
    parsed = gpus.parse_gpu_csv(SMI_CSV)
    assert [g.index for g in parsed] == [0, 1, 2]
    assert parsed[0].name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (parsed[0].memory_used_mib, parsed[0].memory_total_mib, parsed[0].utilization_pct) == (80211, 97887, 0)
    assert (parsed[2].memory_used_mib, parsed[2].utilization_pct) == (None, None)
    assert [g.index for g in gpus.busy(parsed, 1024)] == [0]  # unknown memory is not "busy"
    assert gpus.parse_gpu_csv("") == []


def test_parse_gpu_csv_refuses_a_different_format():
    with pytest.raises(gpus.GpuQueryError, match="want 6 fields"):
        gpus.parse_gpu_csv("0, 80211\n")


def test_parse_proc_devices_reads_dynamic_majors_of_character_devices_only():
    majors = gpus.parse_proc_devices(PROC_DEVICES)
    assert majors["nvidia"] == 195 and majors["nvidia-uvm"] == 510 and majors["nvidia-caps"] == 237
    assert "loop" not in majors and "drm" not in majors
    assert gpus.parse_proc_devices("Character devices:\n195 nvidia-frontend\n241 nvidia-uvm\n") == {
        "nvidia": 195,
        "nvidia-uvm": 241,
    }


def test_parse_driver_version_from_proc_and_from_nvidia_smi():
    proc = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:27:00 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert gpus.parse_driver_version(proc) == "580.95.05"
    assert (
        gpus.parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 UTC 2024")
        == "550.54.15"
    )
    assert gpus.parse_driver_version("575.57.08\n575.57.08\n") == "575.57.08"
    assert gpus.parse_driver_version("") is None


def test_parse_gpu_csv_reads_what_a_real_h200_printed():
    text = (Path(__file__).parent / "fixtures" / "h200" / "nvidia-smi-query.csv").read_text()  # tests/gpu's capture
    (gpu,) = gpus.parse_gpu_csv(text)
    assert gpu.name == "NVIDIA H200" and gpu.memory_total_mib == 143771 and gpu.uuid.startswith("GPU-")


def test_query_gpus_is_none_without_nvidia_smi_and_parses_with_it(tmp_path, monkeypatch):
    assert gpus.query_gpus() is None
    monkeypatch.setenv("SGLANG_PVE_NVIDIA_SMI", str(fake_nvidia_smi(tmp_path, SMI_CSV)))
    assert [g.memory_used_mib for g in gpus.query_gpus()] == [80211, 3, None]


def test_query_gpus_reports_a_failing_nvidia_smi(tmp_path, monkeypatch):
    broken = tmp_path / "nvidia-smi-broken"
    broken.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    broken.chmod(0o755)
    monkeypatch.setenv("SGLANG_PVE_NVIDIA_SMI", str(broken))
    with pytest.raises(gpus.GpuQueryError, match="version mismatch"):
        gpus.query_gpus()


def test_device_majors_nodes_and_driver_version_from_fake_proc_and_dev(tmp_path, monkeypatch, agent_env):
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "devices").write_text(PROC_DEVICES)
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n"
    )
    monkeypatch.setenv("SGLANG_PVE_PROC", str(proc))
    assert gpus.device_majors()["nvidia-uvm"] == 510
    assert gpus.driver_version() == "580.95.05"
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(agent_env / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    os.mknod(agent_env / "nvidia-uvm", stat.S_IFCHR | 0o666, os.makedev(510, 1))
    (agent_env / "nvidia-caps").mkdir()
    os.mknod(agent_env / "nvidia-caps" / "nvidia-cap1", stat.S_IFCHR | 0o400, os.makedev(237, 1))
    (agent_env / "nvidia-notes.txt").write_text("a regular file is no device node")
    nodes = {os.path.basename(n.path): (n.major, n.minor) for n in gpus.device_nodes()}
    assert nodes == {"nvidia0": (195, 0), "nvidia-uvm": (510, 1), "nvidia-cap1": (237, 1)}
