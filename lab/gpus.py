"""Fake NVIDIA GPUs: real character device nodes with the numbers NVIDIA's driver gives them.

No driver owns them, so opening one for I/O fails with ENXIO ("No such device or address"),
exactly as on a host without the module, while O_PATH opens (what the SGLang simulator holds
to look like a GPU user) succeed. The numbers follow NVIDIA's open kernel modules
(https://github.com/NVIDIA/open-gpu-kernel-modules, read at 595.45.04):

- kernel-open/common/inc/nv-chardev-numbers.h: the fixed major NV_MAJOR_DEVICE_NUMBER 195; minors
  0..NV_MINOR_DEVICE_NUMBER_REGULAR_MAX (247) for the GPUs, NV_MINOR_DEVICE_NUMBER_CONTROL_DEVICE
  255 for /dev/nvidiactl. kernel-open/nvidia/nv.c: nv_linux_assign_minor_locked gives each probed
  GPU the first free minor (here GPU i gets i); nv_drivers_init -> nv_register_chrdev registers
  "nvidia" (195:0-247) and "nvidiactl" (195:255).
- Dynamic majors, alloc_chrdev_region, in the order nvidia.ko's nvidia_init_module (nv.c) asks for
  them: "nvidia-caps-imex-channels" (nv-caps-imex.c nv_caps_imex_init; skipped when
  NVreg_ImexChannelCount is 0, default 2048 per nv-reg.h), then in nv_module_init "nvidia-caps"
  (nv-caps.c nv_cap_drv_init) and nvlink_drivers_init's "nvidia-nvlink" (nvlink_linux.c
  nvlink_core_init) and "nvidia-nvswitch" (linux_nvswitch.c nvswitch_init); nvidia-uvm.ko later
  asks for "nvidia-uvm" (kernel-open/nvidia-uvm/uvm.c uvm_chardev_create), minors
  NVIDIA_UVM_PRIMARY_MINOR_NUMBER 0 (/dev/nvidia-uvm) and NVIDIA_UVM_TOOLS_MINOR_NUMBER 1
  (/dev/nvidia-uvm-tools) from uvm_common.h.
- Which dynamic major the kernel hands out: Linux fs/char_dev.c find_dynamic_major (dynamic_major).
- Mode 0666, owner root:root: NVIDIA/nvidia-modprobe modprobe-utils/nvidia-modprobe-utils.c,
  NV_DEVICE_FILE_MODE and the DeviceFileMode/UID/GID defaults it reads from
  /proc/driver/nvidia/params (the tool that makes the nodes on a real host).

Checked against an H200 host (open module 580.159.04): its /proc/devices lists 195 nvidia,
195 nvidiactl, 238 nvidia-uvm, 239 nvidia-nvswitch, 240 nvidia-nvlink, 241 nvidia-caps,
242 nvidia-caps-imex-channels with 243..254 taken by other drivers, which is what
node_proc_devices computes from the same base (tests/unit/test_lab_gpus.py); its nodes are
crw-rw-rw- root root. /dev/nvidia-caps/* (made by nvidia-modprobe -f for MIG) are not faked:
CUDA without MIG does not open them.
"""

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from lab import layout

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
UVM_MINOR = 0
UVM_TOOLS_MINOR = 1
DEVICE_FILE_MODE = 0o666
GPU_MODEL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"  # lab/sglang_sim/nvidia_smi.py NAME
# nvidia.ko's dynamic regions in the order it allocates them, then nvidia-uvm.ko's (see above)
NVIDIA_DYNAMIC = ("nvidia-caps-imex-channels", "nvidia-caps", "nvidia-nvlink", "nvidia-nvswitch")
UVM_NAME = "nvidia-uvm"
# fs/char_dev.c: chrdevs[] hashes majors into CHRDEV_MAJOR_HASH_SIZE slots (major % 255); dynamic
# majors come from slots 254 down to CHRDEV_MAJOR_DYN_END 234, then from
# CHRDEV_MAJOR_DYN_EXT_START 511 down to CHRDEV_MAJOR_DYN_EXT_END 384 (include/linux/fs.h).
HASH_SIZE = 255
DYNAMIC_MAJORS = range(254, 233, -1)
DYNAMIC_EXT_MAJORS = range(511, 383, -1)


@dataclass(frozen=True)
class DeviceNode:
    """A fake node: ``path`` in the node's /dev, made at ``source`` in the lab's state dir."""

    path: str
    major: int
    minor: int
    source: str


def character_majors(proc_devices: str) -> list[int]:
    r"""The majors of /proc/devices' character section, in order.

    >>> character_majors("Character devices:\n  1 mem\n195 nvidia\n\nBlock devices:\n  7 loop\n")
    [1, 195]
    """
    character = proc_devices.split("Block devices:")[0]
    return [int(major) for major in re.findall(r"^\s*(\d+) ", character, re.M)]


def dynamic_major(taken: list[int]) -> int:
    """fs/char_dev.c find_dynamic_major: the first slot from 254 down whose hash chain is empty
    (a major above 254 fills slot major % 255, so 509 takes 254 away), then the first major
    from 511 down that nobody holds.

    >>> dynamic_major([254, 253]), dynamic_major([509]), dynamic_major(list(range(234, 255)))
    (252, 253, 511)
    """
    slots = {major % HASH_SIZE for major in taken}
    for major in DYNAMIC_MAJORS:
        if major not in slots:
            return major
    for major in DYNAMIC_EXT_MAJORS:
        if major not in taken:
            return major
    raise ValueError("dynamic allocation region is full")  # fs/char_dev.c's -EBUSY


def driver_majors(proc_devices: str) -> dict[str, int]:
    r"""The majors NVIDIA's modules would get on a host whose /proc/devices (without them) is
    ``proc_devices``: nvidia.ko's regions, then nvidia-uvm.ko's.

    >>> driver_majors("Character devices:\n252 dax\n253 dimmctl\n254 ndctl\n\nBlock devices:\n")["nvidia-uvm"]
    247
    """
    taken = character_majors(proc_devices)
    majors = {"nvidia": NVIDIA_MAJOR, "nvidiactl": NVIDIA_MAJOR}
    for name in (*NVIDIA_DYNAMIC, UVM_NAME):
        majors[name] = dynamic_major(taken)
        taken.append(majors[name])
    return majors


def _host_proc_devices(proc_devices: str | None) -> str:
    return Path("/proc/devices").read_text() if proc_devices is None else proc_devices


def uvm_major(proc_devices: str | None = None) -> int:
    """The major the kernel would give nvidia-uvm on this host (the lab host's /proc/devices)."""
    return driver_majors(_host_proc_devices(proc_devices))[UVM_NAME]


def node_proc_devices(proc_devices: str | None = None) -> str:
    r"""The host's /proc/devices with the NVIDIA modules' lines, as a node with nvidia.ko and
    nvidia-uvm.ko loaded shows it: fs/char_dev.c chrdev_show, one "%3d name" line per region,
    by major, regions of one major by base minor (nvidia before nvidiactl).

    >>> print(node_proc_devices("Character devices:\n 10 misc\n254 ndctl\n\nBlock devices:\n"))
    Character devices:
     10 misc
    195 nvidia
    195 nvidiactl
    249 nvidia-uvm
    250 nvidia-nvswitch
    251 nvidia-nvlink
    252 nvidia-caps
    253 nvidia-caps-imex-channels
    254 ndctl
    <BLANKLINE>
    Block devices:
    <BLANKLINE>
    """
    text = _host_proc_devices(proc_devices)
    character, block = text.split("\n\nBlock devices:")
    lines = character.splitlines()[1:]
    lines += [f"{major:3d} {name}" for name, major in driver_majors(text).items()]
    lines.sort(key=lambda line: int(line.split()[0]))  # stable: nvidia stays before nvidiactl
    return "Character devices:\n" + "\n".join(lines) + "\n\nBlock devices:" + block


def node_device_rules(proc_devices: str | None = None) -> list[str]:
    r"""pve1's device cgroup: every NVIDIA major, any minor, mknod included (a node's root is not
    confined), so its nvidia-modprobe can make the nodes; what it makes is up to the tool.

    >>> node_device_rules("Character devices:\n254 ndctl\n\nBlock devices:\n")[:2]
    ['lxc.cgroup2.devices.allow = c 195:* rwm', 'lxc.cgroup2.devices.allow = c 249:* rwm']
    """
    majors = sorted(set(driver_majors(_host_proc_devices(proc_devices)).values()))
    return [f"lxc.cgroup2.devices.allow = c {major}:* rwm" for major in majors]


def gpu_information(index: int, bus: str) -> str:
    r"""/proc/driver/nvidia/gpus/<bus>/information of GPU ``index`` (minor ``index``), in the
    lines of NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c nv_procfs_read_gpu_info
    that matter here (Model, Bus Location, Device Minor).

    >>> gpu_information(3, "0000:5d:00.0").splitlines()[3:]
    ['Bus Location: \t 0000:5d:00.0', 'Device Minor: \t 3']
    """
    return (
        f"Model: \t\t {GPU_MODEL}\nIRQ:   \t\t 0\nBus Type: \t PCIe\nBus Location: \t {bus}\nDevice Minor: \t {index}\n"
    )


def lab_devices() -> list[DeviceNode]:
    """/dev/nvidia0..7, nvidiactl, nvidia-uvm and nvidia-uvm-tools, made under the state dir."""
    uvm = uvm_major()
    nodes = [(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(layout.GPU_COUNT)]
    nodes += [("nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR), ("nvidia-uvm", uvm, UVM_MINOR)]
    nodes += [("nvidia-uvm-tools", uvm, UVM_TOOLS_MINOR)]
    return [DeviceNode(f"/dev/{name}", major, minor, str(layout.DEV_DIR / name)) for name, major, minor in nodes]


def create_device_nodes(devices: list[DeviceNode]) -> None:
    """mknod each source node, mode 0666 like the driver's; existing correct ones are kept."""
    layout.DEV_DIR.mkdir(parents=True, exist_ok=True)
    for device in devices:
        wanted = os.makedev(device.major, device.minor)
        try:
            current = os.lstat(device.source)
            if stat.S_ISCHR(current.st_mode) and current.st_rdev == wanted:
                os.chmod(device.source, DEVICE_FILE_MODE)
                continue
            os.unlink(device.source)
        except FileNotFoundError:
            pass
        os.mknod(device.source, stat.S_IFCHR | DEVICE_FILE_MODE, wanted)
        os.chmod(device.source, DEVICE_FILE_MODE)  # mknod's mode is filtered by the umask
