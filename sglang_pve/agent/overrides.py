"""Where the agent looks for the host's tools and kernel files; environment overrides for tests.

| variable                | default                  | used for                                  |
|-------------------------|--------------------------|-------------------------------------------|
| `SGLANG_PVE_PROC`       | `/proc`                  | process table, /proc/devices, driver file |
| `SGLANG_PVE_DEV_GLOB`   | `/dev/nvidia*`           | which open files count as GPU devices     |
| `SGLANG_PVE_NVIDIA_SMI` | `nvidia-smi` on PATH     | GPU memory/utilization ("" = absent)      |
| `SGLANG_PVE_NVIDIA_SMI_TIMEOUT` | `15`             | seconds one nvidia-smi call may take      |
| `SGLANG_PVE_SYSTEMCTL`  | `systemctl` on PATH      | unit state, restart                       |
| `SGLANG_PVE_SYSTEMD_RUN` | `systemd-run` on PATH   | detached switches (detached.py), crash restarts (crashes.py) |
| `SGLANG_PVE_RUN_DIR`    | `/run/sglang-pve`        | the stop-requested markers (stopping.py)  |
| `SGLANG_PVE_RELEASES_DIR` | `/var/lib/sglang-pve/releases` | the releases prestart holds files to (mixed.py) |
| `SGLANG_PVE_TEXTFILE_DIR` | `/var/lib/prometheus/node-exporter` | where the metrics file goes (metrics.py) |

Production units set none of them. They are read at call time, so tests can set them per test.
"""

import os
import shutil

from sglang_pve.agent import contract


def proc_root() -> str:
    return os.environ.get("SGLANG_PVE_PROC", "/proc")


def device_glob() -> str:
    return os.environ.get("SGLANG_PVE_DEV_GLOB", "/dev/nvidia*")


def run_dir() -> str:
    return os.environ.get("SGLANG_PVE_RUN_DIR", contract.RUN_DIR)


def releases_dir() -> str:
    return os.environ.get("SGLANG_PVE_RELEASES_DIR", contract.RELEASES_DIR)


def textfile_dir() -> str:
    return os.environ.get("SGLANG_PVE_TEXTFILE_DIR", contract.TEXTFILE_DIR)


def nvidia_smi_timeout() -> float:
    return float(os.environ.get("SGLANG_PVE_NVIDIA_SMI_TIMEOUT", "15"))  # nvidia-smi hangs when a GPU is wedged


def nvidia_smi() -> str | None:
    """Path of nvidia-smi, or None where it does not exist (no driver userspace installed)."""
    return _tool("SGLANG_PVE_NVIDIA_SMI", "nvidia-smi")


def systemctl() -> str | None:
    return _tool("SGLANG_PVE_SYSTEMCTL", "systemctl")


def systemd_run() -> str | None:
    return _tool("SGLANG_PVE_SYSTEMD_RUN", "systemd-run")


def _tool(variable: str, name: str) -> str | None:
    configured = os.environ.get(variable)
    if configured is None:
        return shutil.which(name)
    if configured and os.access(configured, os.X_OK):
        return configured
    return None
