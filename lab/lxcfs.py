"""The lab's own lxcfs mount, so a container sees its own /proc/uptime (and meminfo, ...).

pyinfra's server.reboot confirms a reboot through /proc/uptime, which in a container is
the host's unless lxcfs stands in for it. Skipped when lxcfs is not installed.
"""

import shutil
import time

from lab import layout, procs
from lab.mounts import mounts_under, unmount_under
from lab.shell import LabError

PID_FILE = layout.RUN_DIR / "lxcfs.pid"
PROC_FILES = ("uptime", "stat", "meminfo", "cpuinfo", "loadavg", "diskstats", "swaps")


def pid() -> int | None:
    return procs.live_pid(PID_FILE, str(layout.LXCFS_DIR))


def mounted() -> bool:
    return bool(pid()) and layout.LXCFS_DIR.resolve() in mounts_under(layout.LXCFS_DIR)


def start() -> bool:
    """Mount lxcfs at the state dir unless it already runs; False when lxcfs is missing."""
    if mounted():
        return True
    if not shutil.which("lxcfs"):
        return False
    stop()  # a killed lxcfs leaves a dead FUSE mount ("Transport endpoint is not connected")
    layout.LXCFS_DIR.mkdir(parents=True, exist_ok=True)
    # lxcfs locks its pid file against a second instance; the default /run/lxcfs.pid
    # belongs to a system lxcfs, so it gets ours (the same pid is written to it).
    procs.start_daemon(
        ["lxcfs", "--foreground", "--pidfile", str(PID_FILE), str(layout.LXCFS_DIR)],
        PID_FILE,
        layout.LOG_DIR / "lxcfs.log",
    )
    for _ in range(100):
        if mounted() and (layout.LXCFS_DIR / "proc/uptime").exists():
            return True
        time.sleep(0.05)
    raise LabError(f"lxcfs did not mount at {layout.LXCFS_DIR}")


def stop() -> None:
    unmount_under(layout.LXCFS_DIR)
    procs.stop(PID_FILE, str(layout.LXCFS_DIR))


def mount_entries() -> list[str]:
    return [
        f"lxc.mount.entry = {layout.LXCFS_DIR}/proc/{name} proc/{name} none bind,optional 0 0" for name in PROC_FILES
    ]
