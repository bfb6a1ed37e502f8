"""Fake NVIDIA GPUs: real character device nodes with the driver's majors and minors.

No driver owns them, so opening one for I/O fails with ENXIO ("No such device or address"),
exactly as on a host without the module, while O_PATH opens (what the SGLang simulator holds
to look like a GPU user) succeed. They are bound into the container with the production
passthrough lines from sglang_pve.passthrough.
"""

import os
import stat

from lab import layout
from sglang_pve.passthrough import DeviceNode, nvidia_devices


def lab_devices() -> list[DeviceNode]:
    """/dev/nvidia0..7, nvidiactl, nvidia-uvm(-tools), bound from the state dir's fake nodes."""
    return nvidia_devices(range(layout.GPU_COUNT), layout.UVM_MAJOR, source_dir=str(layout.DEV_DIR))


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
