"""The node's NVIDIA device nodes as CUDA in a container needs them, checked before any container
is written: PVE stats every devN path at create and at each start ("Device /dev/nvidia-uvm does
not exist", pve-container src/PVE/LXC/Tools.pm get_device_mode_and_rdev), and the raw lines bind
them by path.

What each node must be (the numbers NVIDIA's driver registers, NVIDIA/open-gpu-kernel-modules
kernel-open/common/inc/nv-chardev-numbers.h and kernel-open/nvidia-uvm/uvm_common.h;
passthrough.nvidia_devices): /dev/nvidiaN at (195, N) for each GPU of the kernel module,
/dev/nvidiactl at (195, 255), /dev/nvidia-uvm at (nvidia-uvm major, 0) and /dev/nvidia-uvm-tools at
(its major, 1), the majors read from the node's /proc/devices. /dev/nvidia-caps/nvidia-cap1 and
nvidia-cap2 (an H200 node has them) are MIG's mig/config and mig/monitor capabilities
(kernel-open/nvidia/nv-caps.c g_nv_cap_mig_table): not checked and not passed, the servers use
whole GPUs.

>>> from sglang_pve.agent.gpus import DeviceNode
>>> from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
>>> gpus = GpuDeviceInfo({"nvidia": 195, "nvidia-uvm": 238}, [DeviceNode("/dev/nvidia0", 195, 0),
...     DeviceNode("/dev/nvidiactl", 195, 255), DeviceNode("/dev/nvidia-uvm", 238, 7),
...     DeviceNode("/dev/nvidia-uvm-tools", 238, 8)], "580.95.05", driver_minors=[0])
>>> [(p.key, p.value) for p in problems(gpus)]
[('/dev/nvidia-uvm', 'c 238:7'), ('/dev/nvidia-uvm-tools', 'c 238:8')]
"""

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation

from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo, GpuDevices
from sglang_pve.provision.node_prep import DEVICE_NODES_UNIT, MODULES_LOAD
from sglang_pve.provision.passthrough import nvidia_devices

UVM = "nvidia-uvm"
RESTART = f"systemctl restart {DEVICE_NODES_UNIT}"


def problems(gpus: GpuDeviceInfo) -> list[Problem]:
    """Every node that is missing or has other numbers, each with the fix; none for a node without GPUs."""
    if not gpus.gpu_indices:
        return []
    fix = (
        f"run the node preparation (tasks/pve_host.py), or on the node: {RESTART} (nvidia-modprobe -c=N "
        "per GPU and -c=255 for nvidiactl, then nvidia-modprobe -u -c=0 for the uvm pair)"
    )
    found: list[Problem] = []
    uvm = gpus.majors.get(UVM)
    if uvm is None:
        found.append(
            Problem(
                "/proc/devices",
                UVM,
                "the nvidia-uvm module is not loaded (no major in /proc/devices), so /dev/nvidia-uvm cannot exist",
                f"modprobe nvidia_uvm on the node (the node preparation loads it at boot through {MODULES_LOAD}), "
                f"then {RESTART}",
            )
        )
    for wanted in nvidia_devices(gpus.gpu_indices, uvm_major=-1 if uvm is None else uvm):
        if wanted.major < 0:
            continue  # no nvidia-uvm major: reported above
        current = gpus.node(wanted.path)
        if current is None or (current.major, current.minor) != (wanted.major, wanted.minor):
            found.append(
                Problem(
                    wanted.path,
                    "missing" if current is None else f"c {current.major}:{current.minor}",
                    f"it must be the character device {wanted.major}:{wanted.minor} "
                    f"({'nvidia-uvm' if wanted.major == uvm else 'nvidia'} major from /proc/devices)",
                    fix,
                )
            )
    return found


@operation()
def present(gpus: GpuDeviceInfo):
    """
    Refuse, before any container is written, a node whose NVIDIA device nodes are missing or wrong
    once its node preparation ran. Decides from `gpus`, the node's GpuDevices as read when the run
    was prepared (its one node read, node_facts.py); where that shows a problem, the check runs
    again when executed (after the device-node unit ran: deploys/full.py's order), reading the node
    afresh, and fails the node, naming every node, its numbers and the fix.

    + gpus: the node's GpuDevices fact

    **Example:**

    .. code:: python

        device_nodes.present(name="NVIDIA device nodes present", gpus=node_gpus())
    """
    if not problems(gpus):
        host.noop("every NVIDIA device node has the driver's numbers")
        return
    yield FunctionCommand(_check, (), {})


def _check(state, host) -> bool:
    """Fails the node (so none of its containers is written) while a node is still wrong."""
    found = problems(host.get_fact(GpuDevices))
    if found:
        host.log_styled(str(ConfigError(host.name, found)), fg="red", log_func=logger.error)
    return not found
