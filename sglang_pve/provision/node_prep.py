"""What a Proxmox node needs before its GPU containers can start (deploys/node_prep.py renders it).

>>> from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
>>> from sglang_pve.agent.gpus import DeviceNode
>>> nodes = [DeviceNode("/dev/nvidia0", 195, 0), DeviceNode("/dev/nvidia1", 195, 1)]
>>> unit = node_prep_files(GpuDeviceInfo({}, nodes, None))[1]
>>> [line for line in unit.content.splitlines() if line.startswith(("Before", "ExecStart"))]
['Before=pve-guests.service', 'ExecStart=/usr/bin/nvidia-smi', 'ExecStart=/usr/bin/nvidia-modprobe -u -c=0 -c=1']
"""

from sglang_pve.agent.contract import MARKER
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.deploy.operations.files import ManagedFile

DEVICE_NODES_UNIT = "sglang-pve-nvidia-nodes.service"
MODULES_LOAD = "/etc/modules-load.d/nvidia.conf"
_HEADER = f"# {MARKER}: written by its node preparation (sglang_pve/deploys/node_prep.py)."


def node_prep_files(gpus: GpuDeviceInfo) -> list[ManagedFile]:
    """modules-load.d (nvidia, nvidia_uvm) and the oneshot unit that makes every node exist at boot:
    nvidia-smi creates /dev/nvidiaN and nvidiactl, nvidia-modprobe -u the nvidia-uvm pair (created
    lazily otherwise, and nothing inside a container may create it)."""
    minors = gpus.gpu_indices
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
            "ExecStart=/usr/bin/nvidia-smi",
            "ExecStart=/usr/bin/nvidia-modprobe -u " + " ".join(f"-c={m}" for m in minors or [0]),
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )
    return [
        ManagedFile(MODULES_LOAD, f"{_HEADER}\nnvidia\nnvidia_uvm\n"),
        ManagedFile(f"/etc/systemd/system/{DEVICE_NODES_UNIT}", unit),
    ]
