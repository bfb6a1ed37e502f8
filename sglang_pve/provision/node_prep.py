"""What a Proxmox node needs before its GPU containers can start (deploys/node_prep.py renders it).

The unit runs NVIDIA's nvidia-modprobe as its source says it works (NVIDIA/nvidia-modprobe,
nvidia-modprobe.c main() and modprobe-utils/nvidia-modprobe-utils.c, read at a9556df): without
`-u`, each `-c N` is nvidia_mknod(N), /dev/nvidiaN at (195, N), and N=255 is /dev/nvidiactl
(assign_device_file_name); with `-u`, each `-c N` is nvidia_uvm_mknod(N), a *base* minor:
/dev/nvidia-uvm at (uvm major, N) and /dev/nvidia-uvm-tools at N+1, a node with other numbers
replaced (mknod_helper). So the uvm pair is made once, by `-u -c=0`; `-u -c=0 -c=1 ... -c=7` (what
this unit ran before) leaves uvm at minor 7 and tools at 8, and `-u` alone makes no node at all.

>>> from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
>>> unit = node_prep_files(GpuDeviceInfo({}, [], None, driver_minors=[0, 1]))[1]
>>> for line in unit.content.splitlines():
...     if line.startswith(("Before", "ExecStart")): print(line)
Before=pve-guests.service
ExecStart=/usr/bin/nvidia-modprobe -c=0 -c=1 -c=255
ExecStart=/usr/bin/nvidia-modprobe -u -c=0
"""

from sglang_pve.agent.contract import MARKER
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.deploy.operations.files import ManagedFile
from sglang_pve.provision.passthrough import NVIDIACTL_MINOR, UVM_MINOR

DEVICE_NODES_UNIT = "sglang-pve-nvidia-nodes.service"
MODULES_LOAD = "/etc/modules-load.d/nvidia.conf"
NVIDIA_MODPROBE = "/usr/bin/nvidia-modprobe"
PERSISTENCED_UNIT = "nvidia-persistenced.service"
DEVICE_NODES_UNIT_FILE = f"/etc/systemd/system/{DEVICE_NODES_UNIT}"
NODE_PREP_PATHS = (MODULES_LOAD, DEVICE_NODES_UNIT_FILE)  # node_prep_files' paths, in order
_HEADER = f"# {MARKER}: written by its node preparation (sglang_pve/deploys/node_prep.py)."


def modprobe_commands(gpu_minors: list[int]) -> list[str]:
    """The nvidia module's nodes (one -c per GPU, and nvidiactl), then the uvm pair at base minor 0.

    >>> modprobe_commands([])
    ['/usr/bin/nvidia-modprobe -c=255', '/usr/bin/nvidia-modprobe -u -c=0']
    """
    minors = [*sorted(gpu_minors), NVIDIACTL_MINOR]
    return [f"{NVIDIA_MODPROBE} " + " ".join(f"-c={m}" for m in minors), f"{NVIDIA_MODPROBE} -u -c={UVM_MINOR}"]


def node_prep_files(gpus: GpuDeviceInfo) -> list[ManagedFile]:
    """modules-load.d (nvidia, nvidia_uvm) and the oneshot unit that makes every node exist, at
    boot before pve-guests.service and whenever the deploy starts it: the uvm pair is created
    lazily otherwise, and nothing inside a container may create it."""
    unit = "\n".join(
        [
            _HEADER,
            "[Unit]",
            "Description=Create every NVIDIA device node before guests start (sglang-pve)",
            "After=systemd-modules-load.service",
            "Before=pve-guests.service",
            "",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            *(f"ExecStart={command}" for command in modprobe_commands(gpus.gpu_indices)),
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )
    return [
        ManagedFile(MODULES_LOAD, f"{_HEADER}\nnvidia\nnvidia_uvm\n"),
        ManagedFile(DEVICE_NODES_UNIT_FILE, unit),
    ]


def persistenced_warning(host_name: str, load_state: str | None) -> str:
    """Why the persistence daemon is left alone on this node, and what to do about it."""
    return (
        f"{host_name}: {PERSISTENCED_UNIT} is not installed (systemd LoadState: {load_state or 'unknown'}), as "
        "after NVIDIA's .run installer: skipped. The GPUs still work; without persistence the driver "
        "tears its state down whenever the last process closes a GPU, so every server start pays the "
        "initialisation again. Fix: install its unit with NVIDIA's nvidia-persistenced init/install.sh "
        "(NVIDIA/nvidia-persistenced: init/systemd/nvidia-persistenced.service.template), or use the "
        "distribution's driver package"
    )
