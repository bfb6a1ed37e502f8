"""GPU facts: device nodes and majors, nvidia-smi's numbers, and who holds /dev/nvidia*.

The parsing is the agent's (sglang_pve.agent.gpus), so the target and the controller read the
same text the same way. Majors come from /proc/devices: nvidia-uvm's is dynamic per host.
"""

from dataclasses import dataclass

from pyinfra.api import FactBase

from sglang_pve.agent.gpus import (
    QUERY,
    DeviceNode,
    Gpu,
    parse_driver_version,
    parse_fd_links,
    parse_gpu_csv,
    parse_proc_devices,
)

_SECTION = "--- sglang-pve section"


def _sections(output: list[str]) -> list[list[str]]:
    sections, current = [], []
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

    @property
    def gpu_indices(self) -> list[int]:
        """N of every /dev/nvidiaN, sorted."""
        return sorted(
            int(n.path.removeprefix("/dev/nvidia")) for n in self.nodes if n.path.removeprefix("/dev/nvidia").isdigit()
        )

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_indices)


class GpuDevices(FactBase[GpuDeviceInfo]):
    """NVIDIA device majors, nodes and driver version, in one command.

    host.get_fact(GpuDevices)
    # GpuDeviceInfo(majors={"nvidia": 195, "nvidia-uvm": 238}, nodes=[DeviceNode("/dev/nvidia0", 195, 0), ...],
    #               driver="580.95.05")
    """

    def command(self):
        return (
            f"cat /proc/devices; echo '{_SECTION}'; "
            'for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c "$f" ] && stat -c \'%n %Hr %Lr\' "$f"; done; '
            f"echo '{_SECTION}'; cat /proc/driver/nvidia/version 2>/dev/null; true"
        )

    def process(self, output):
        devices, nodes, version = _sections(output)
        parsed = [line.split() for line in nodes]
        return GpuDeviceInfo(
            majors={
                name: major
                for name, major in parse_proc_devices("\n".join(devices)).items()
                if name.startswith("nvidia")
            },
            nodes=[DeviceNode(path, int(major), int(minor)) for path, major, minor in parsed],
            driver=parse_driver_version("\n".join(version)),
        )


class GpuStatus(FactBase[list]):
    """Per-GPU memory and utilization from nvidia-smi; [] where nvidia-smi is missing.

    host.get_fact(GpuStatus)  # [Gpu(index=0, uuid="GPU-...", name="NVIDIA H200", memory_used_mib=4, ...), ...]
    """

    @staticmethod
    def default() -> list[Gpu]:
        return []

    def requires_command(self):
        return "nvidia-smi"

    def command(self):
        return f"nvidia-smi --query-gpu={QUERY} --format=csv,noheader,nounits"

    def process(self, output):
        return parse_gpu_csv("\n".join(output))


@dataclass(frozen=True)
class Holder:
    pid: int
    devices: list[str]
    cmdline: str


class DeviceHolders(FactBase[list]):
    """Processes with /dev/nvidia* open (from /proc/*/fd, so it works inside LXC where
    nvidia-smi lists no processes), with their command lines.

    host.get_fact(DeviceHolders)  # [Holder(pid=4242, devices=["/dev/nvidia0", "/dev/nvidiactl"], cmdline="python ...")]
    """

    @staticmethod
    def default() -> list[Holder]:
        return []

    def command(self):
        return (
            "find /proc/[0-9]*/fd -lname '/dev/nvidia*' -printf '%h %l\\n' 2>/dev/null; "
            f"echo '{_SECTION}'; for p in $(find /proc/[0-9]*/fd -lname '/dev/nvidia*' -printf '%h\\n' 2>/dev/null "
            "| cut -d/ -f3 | sort -un); do printf '%s ' $p; tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null; echo; done"
        )

    def process(self, output):
        links, commands = _sections(output)
        cmdlines = dict(line.split(" ", 1) if " " in line else (line, "") for line in commands if line.strip())
        return [
            Holder(pid, devices, cmdlines.get(str(pid), "").strip())
            for pid, devices in parse_fd_links("\n".join(links)).items()
        ]


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
