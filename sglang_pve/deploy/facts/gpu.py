"""GPU facts: device nodes and majors, the user-space driver's version.

The parsing is the agent's (sglang_pve.agent.gpus), so the target and the controller read the
same text the same way. Majors come from /proc/devices: nvidia-uvm's is dynamic per host. The
GPUs a node has are the kernel module's (/proc/driver/nvidia/gpus/<bus>/information, "Device
Minor:", NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c nv_procfs_read_gpu_info),
whether or not their /dev/nvidiaN exist yet. Who
holds /dev/nvidia* and how much GPU memory is in use, the agent reports itself (agent/holders.py
and agent/gpus.py, in `status --json`: the ServerStatus fact).
"""

import re
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from sglang_pve.agent.gpus import DeviceNode, parse_driver_version, parse_proc_devices

_SECTION = "--- sglang-pve section"


def _sections(output: list[str]) -> list[list[str]]:
    sections: list[list[str]] = []
    current: list[str] = []
    for line in output:
        if line == _SECTION:
            sections.append(current)
            current = []
        else:
            current.append(line)
    return sections + [current]


@dataclass(frozen=True)
class GpuDeviceInfo:
    majors: dict[str, int]  # /proc/devices: {"nvidia": 195, "nvidia-uvm": 238, ...}
    nodes: list[DeviceNode]  # /dev/nvidia* character devices
    driver: str | None  # from /proc/driver/nvidia/version
    driver_minors: list[int] = field(default_factory=list)  # the module's GPUs (/proc/driver/nvidia/gpus)
    persistenced: str | None = None  # nvidia-persistenced.service's LoadState ("loaded", "not-found"); None: no systemd

    @property
    def gpu_indices(self) -> list[int]:
        """The node's GPU minors: the kernel module's, else N of every /dev/nvidiaN; sorted."""
        return sorted(self.driver_minors) or sorted(
            int(n.path.removeprefix("/dev/nvidia")) for n in self.nodes if n.path.removeprefix("/dev/nvidia").isdigit()
        )

    def node(self, path: str) -> DeviceNode | None:
        return next((n for n in self.nodes if n.path == path), None)

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_indices)


class GpuDevices(FactBase[GpuDeviceInfo]):
    """NVIDIA device majors, nodes, driver version, the module's GPU minors and whether
    nvidia-persistenced.service is installed (a driver from NVIDIA's .run installer has none), in
    one command.

    host.get_fact(GpuDevices)
    # GpuDeviceInfo(majors={"nvidia": 195, "nvidia-uvm": 238}, nodes=[DeviceNode("/dev/nvidia0", 195, 0), ...],
    #               driver="580.95.05", driver_minors=[0, 1, ...], persistenced="loaded")
    """

    def command(self):
        return (
            f"cat /proc/devices; echo '{_SECTION}'; "
            'for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c "$f" ] && stat -c \'%n %Hr %Lr\' "$f"; done; '
            f"echo '{_SECTION}'; cat /proc/driver/nvidia/version 2>/dev/null; "
            f"echo '{_SECTION}'; cat /proc/driver/nvidia/gpus/*/information 2>/dev/null; "
            f"echo '{_SECTION}'; systemctl show -p LoadState --value nvidia-persistenced.service 2>/dev/null; true"
        )

    def process(self, output):
        devices, nodes, version, information, persistenced = (_sections(output) + [[], []])[:5]
        parsed = [line.split() for line in nodes]
        return GpuDeviceInfo(
            majors={
                name: major
                for name, major in parse_proc_devices("\n".join(devices)).items()
                if name.startswith("nvidia")
            },
            nodes=[DeviceNode(path, int(major), int(minor)) for path, major, minor in parsed],
            driver=parse_driver_version("\n".join(version)),
            driver_minors=sorted(
                int(match.group(1)) for line in information if (match := re.match(r"Device Minor:\s*(\d+)", line))
            ),
            persistenced=persistenced[0].strip() if persistenced and persistenced[0].strip() else None,
        )


class UserSpaceDriver(FactBase[str]):
    """The NVIDIA user-space driver's version in this host (a container: its own libraries, which
    must match the node's kernel module), as nvidia-smi reports it; on a mismatch nvidia-smi fails
    ("Failed to initialize NVML: Driver/library version mismatch") and names its library version
    ("NVML library version: 570.00.01"), which is the answer then; any other failure: its first
    line; None without nvidia-smi.

    host.get_fact(UserSpaceDriver)  # "580.95.05"
    """

    def requires_command(self):
        return "nvidia-smi"

    def command(self):
        return "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 3"

    def process(self, output):
        library = next(
            (line.split(":", 1)[1].strip() for line in output if line.startswith("NVML library version:")), None
        )
        return library or (output[0].strip() if output else None)
