"""Render the container config that passes NVIDIA device nodes into an LXC container.

Pure functions, no I/O. The caller supplies the device nodes: a Proxmox host reads the
dynamic nvidia-uvm major from /proc/devices, the lab uses fake nodes under its state dir.
Three renderings of the same passthrough:

- raw LXC lines, ``key = value`` (plain LXC, the lab);
- Proxmox ``/etc/pve/lxc/<vmid>.conf`` lines, ``key: value`` (edited over SSH as root);
- Proxmox API ``devN`` values (PVE >= 8.1, settable through the API by root@pam).

Every node gets its own ``c MAJOR:MINOR rw`` rule rather than ``c 195:* rwm``: the container may
read and write exactly the nodes it was given and mknod none, which is what PVE's ``devN`` emits
(proxmox/pve-container src/PVE/LXC.pm update_lxc_config, read at 94f5585: per device
``lxc.cgroup2.devices.allow = <b|c> MAJ:MIN rw``, or ``r`` plus ``lxc.cgroup2.devices.deny = ... w``
with ``deny-write``; no ``m``). PVE makes the container's node itself (create_passthrough_device_node,
mode 0660 unless ``mode=`` says otherwise; the toolkit says 0666, the mode NVIDIA's nvidia-modprobe
gives the node's own, so the server's unprivileged user can open it).

>>> devices = nvidia_devices(gpu_minors=[0], uvm_major=511)
>>> print("\\n".join(lxc_config_lines(devices)))
lxc.cgroup2.devices.allow = c 195:0 rw
lxc.cgroup2.devices.allow = c 195:255 rw
lxc.cgroup2.devices.allow = c 511:0 rw
lxc.cgroup2.devices.allow = c 511:1 rw
lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry = /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry = /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file
>>> proxmox_config_lines(devices)[0]
'lxc.cgroup2.devices.allow: c 195:0 rw'
>>> proxmox_dev_options(devices)["dev3"]
'/dev/nvidia-uvm-tools,mode=0666'
"""

from collections.abc import Iterable
from dataclasses import dataclass

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
# Minors of the nvidia-uvm driver, whose major is dynamic (see /proc/devices).
UVM_MINOR = 0
UVM_TOOLS_MINOR = 1


@dataclass(frozen=True)
class DeviceNode:
    """A character device node to pass into a container.

    ``path`` is where the node appears inside the container; ``source`` is the host node
    bound there, by default the same path.

    >>> DeviceNode("/dev/nvidia0", 195, 0, source="/var/lib/lab/dev/nvidia0").host_path
    '/var/lib/lab/dev/nvidia0'
    """

    path: str
    major: int
    minor: int
    source: str | None = None

    @property
    def host_path(self) -> str:
        return self.source or self.path


def nvidia_devices(gpu_minors: Iterable[int], uvm_major: int, source_dir: str | None = None) -> list[DeviceNode]:
    """The nodes CUDA needs: one per GPU, nvidiactl, nvidia-uvm and nvidia-uvm-tools.

    ``source_dir`` binds from other host nodes of the same names (the lab's fake ones).

    >>> [d.path for d in nvidia_devices([0, 1], uvm_major=510)]
    ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']
    >>> nvidia_devices([0], 510, source_dir="/lab/dev")[0].source
    '/lab/dev/nvidia0'
    """
    nodes = [(f"nvidia{minor}", NVIDIA_MAJOR, minor) for minor in gpu_minors]
    nodes += [
        ("nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
        ("nvidia-uvm", uvm_major, UVM_MINOR),
        ("nvidia-uvm-tools", uvm_major, UVM_TOOLS_MINOR),
    ]
    return [
        DeviceNode(
            path=f"/dev/{name}",
            major=major,
            minor=minor,
            source=f"{source_dir.rstrip('/')}/{name}" if source_dir else None,
        )
        for name, major, minor in nodes
    ]


def allow_rules(devices: Iterable[DeviceNode]) -> list[str]:
    """Device-cgroup rules, one per distinct node, in input order.

    >>> allow_rules([DeviceNode("/dev/nvidia0", 195, 0), DeviceNode("/dev/nvidia0", 195, 0)])
    ['c 195:0 rw']
    """
    return list(dict.fromkeys(f"c {d.major}:{d.minor} rw" for d in devices))


def _config_items(devices: list[DeviceNode]) -> list[tuple[str, str]]:
    return [("lxc.cgroup2.devices.allow", rule) for rule in allow_rules(devices)] + [
        (
            "lxc.mount.entry",
            f"{d.host_path} {d.path.lstrip('/')} none bind,optional,create=file",
        )
        for d in devices
    ]


def lxc_config_lines(devices: Iterable[DeviceNode]) -> list[str]:
    """Raw LXC config lines (``key = value``); see the module docstring for an example."""
    return [f"{key} = {value}" for key, value in _config_items(list(devices))]


def proxmox_config_lines(devices: Iterable[DeviceNode]) -> list[str]:
    """The same lines in Proxmox ``/etc/pve/lxc/<vmid>.conf`` syntax (``key: value``).

    >>> proxmox_config_lines([DeviceNode("/dev/nvidiactl", 195, 255)])[1]
    'lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file'
    """
    return [f"{key}: {value}" for key, value in _config_items(list(devices))]


def proxmox_dev_options(devices: Iterable[DeviceNode], first_index: int = 0) -> dict[str, str]:
    """Proxmox API ``devN`` options, numbered from ``first_index``.

    PVE creates the node inside the container at the host path, so a ``source`` that
    differs from ``path`` cannot be expressed and is refused.

    >>> proxmox_dev_options([DeviceNode("/dev/nvidia7", 195, 7)], first_index=7)
    {'dev7': '/dev/nvidia7,mode=0666'}
    >>> proxmox_dev_options([DeviceNode("/dev/nvidia0", 195, 0, source="/lab/dev/nvidia0")])
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: devN passes /lab/dev/nvidia0 at the same path inside the container; ...
    """
    options = {}
    for index, device in enumerate(devices, start=first_index):
        if device.host_path != device.path:
            raise ValueError(
                f"devN passes {device.host_path} at the same path inside the container; "
                f"it cannot appear at {device.path}. Use the raw lxc.mount.entry lines instead."
            )
        options[f"dev{index}"] = f"{device.path},mode=0666"
    return options
