"""Fake NVIDIA GPUs: real character device nodes with the driver's majors and minors.

No driver owns them, so opening one for I/O fails with ENXIO ("No such device or address"),
exactly as on a host without the module, while O_PATH opens (what the SGLang simulator holds
to look like a GPU user) succeed. They are bound into the container with the production
passthrough lines from sglang_pve.provision.passthrough.
"""

import os
import re
import stat
from pathlib import Path

from lab import layout
from sglang_pve.provision.passthrough import NVIDIA_MAJOR, DeviceNode, nvidia_devices

# fs/char_dev.c hands out dynamic majors from 254 down to 234 (then 511 down to 384)
DYNAMIC_MAJORS = range(254, 233, -1)


def uvm_major(proc_devices: str | None = None) -> int:
    r"""The major the kernel would give nvidia-uvm on this host: the first free dynamic one.

    >>> uvm_major("Character devices:\n254 ndctl\n253 dimmctl\n\nBlock devices:\n252 zram\n")
    252
    """
    text = Path("/proc/devices").read_text() if proc_devices is None else proc_devices
    character = text.split("Block devices:")[0]
    taken = {int(major) for major in re.findall(r"^\s*(\d+) ", character, re.M)}
    return next(major for major in DYNAMIC_MAJORS if major not in taken)


def node_proc_devices(uvm: int, proc_devices: str | None = None) -> str:
    r"""The host's /proc/devices with the NVIDIA driver's lines, as a node with the driver
    loaded shows it (the open kernel module's names, captured on an H200 node).

    >>> print(node_proc_devices(238, "Character devices:\n 10 misc\n\nBlock devices:\n"))
    Character devices:
     10 misc
    195 nvidia
    195 nvidiactl
    238 nvidia-uvm
    <BLANKLINE>
    Block devices:
    <BLANKLINE>
    """
    text = Path("/proc/devices").read_text() if proc_devices is None else proc_devices
    character, block = text.split("\n\nBlock devices:")
    lines = character.splitlines()[1:]
    lines += [f"{NVIDIA_MAJOR} nvidia", f"{NVIDIA_MAJOR} nvidiactl", f"{uvm:3d} nvidia-uvm"]
    lines.sort(key=lambda line: int(line.split()[0]))
    return "Character devices:\n" + "\n".join(lines) + "\n\nBlock devices:" + block


def lab_devices() -> list[DeviceNode]:
    """/dev/nvidia0..7, nvidiactl, nvidia-uvm(-tools), bound from the state dir's fake nodes."""
    return nvidia_devices(range(layout.GPU_COUNT), uvm_major(), source_dir=str(layout.DEV_DIR))


def create_device_nodes(devices: list[DeviceNode]) -> None:
    """mknod each source node, mode 0666 like the driver's; existing correct ones are kept."""
    layout.DEV_DIR.mkdir(parents=True, exist_ok=True)
    for device in devices:
        wanted = os.makedev(device.major, device.minor)
        try:
            current = os.lstat(device.host_path)
            if stat.S_ISCHR(current.st_mode) and current.st_rdev == wanted:
                os.chmod(device.host_path, 0o666)
                continue
            os.unlink(device.host_path)
        except FileNotFoundError:
            pass
        os.mknod(device.host_path, stat.S_IFCHR | 0o666, wanted)
        os.chmod(device.host_path, 0o666)  # mknod's mode is filtered by the umask
