"""The LXC/Proxmox renderings of NVIDIA device passthrough (sglang_pve.provision.passthrough)."""

import doctest

import pytest

from sglang_pve.provision import passthrough
from sglang_pve.provision.passthrough import (
    DeviceNode,
    allow_rules,
    lxc_config_lines,
    nvidia_devices,
    proxmox_config_lines,
    proxmox_dev_options,
)

EIGHT_GPUS = nvidia_devices(range(8), uvm_major=509)


def test_docstring_examples():
    assert doctest.testmod(passthrough).failed == 0


def test_eight_gpus_give_the_nodes_cuda_needs():
    assert [(d.path, d.major, d.minor) for d in EIGHT_GPUS] == [
        *[(f"/dev/nvidia{i}", 195, i) for i in range(8)],
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-uvm", 509, 0),
        ("/dev/nvidia-uvm-tools", 509, 1),
    ]


def test_raw_lxc_lines_allow_and_bind_every_node():
    """rw per node, what pve-container's update_lxc_config writes for a devN (src/PVE/LXC.pm:
    ``lxc.cgroup2.devices.allow = $device_type_char $major:$minor $allow_perms`` with 'rw')."""
    lines = lxc_config_lines(EIGHT_GPUS)
    assert lines[:2] == [
        "lxc.cgroup2.devices.allow = c 195:0 rw",
        "lxc.cgroup2.devices.allow = c 195:1 rw",
    ]
    assert "lxc.cgroup2.devices.allow = c 509:1 rw" in lines
    assert "lxc.mount.entry = /dev/nvidia7 dev/nvidia7 none bind,optional,create=file" in lines
    assert len(lines) == 2 * len(EIGHT_GPUS)
    assert all(" = " in line and ": " not in line for line in lines)


def test_proxmox_lines_are_the_same_lines_in_colon_syntax():
    raw = lxc_config_lines(EIGHT_GPUS)
    assert proxmox_config_lines(EIGHT_GPUS) == [line.replace(" = ", ": ", 1) for line in raw]


def test_bind_source_may_differ_from_the_container_path():
    devices = nvidia_devices([3], uvm_major=510, source_dir="/var/lib/lab/dev/")
    assert "lxc.mount.entry = /var/lib/lab/dev/nvidia3 dev/nvidia3 none bind,optional,create=file" in lxc_config_lines(
        devices
    )


def test_allow_rules_are_deduplicated_in_order():
    node = DeviceNode("/dev/nvidiactl", 195, 255)
    assert allow_rules([node, DeviceNode("/dev/nvidia0", 195, 0), node]) == [
        "c 195:255 rw",
        "c 195:0 rw",
    ]


def test_proxmox_dev_options_number_every_node():
    options = proxmox_dev_options(EIGHT_GPUS)
    assert list(options) == [f"dev{i}" for i in range(11)]
    assert options["dev0"] == "/dev/nvidia0,mode=0666"
    assert options["dev8"] == "/dev/nvidiactl,mode=0666"
    assert options["dev10"] == "/dev/nvidia-uvm-tools,mode=0666"
    assert list(proxmox_dev_options(EIGHT_GPUS[:1], first_index=4)) == ["dev4"]


def test_proxmox_dev_options_refuse_a_differing_source():
    with pytest.raises(ValueError, match="raw lxc.mount.entry"):
        proxmox_dev_options(nvidia_devices([0], 510, source_dir="/lab/dev"))
