"""GPU facts parse what a real H200 host printed (captured by tests/gpu on the device machine)."""

from pathlib import Path

from sglang_pve.deploy.facts.gpu import _SECTION, DeviceHolders, GpuDevices, GpuStatus

FIXTURES = Path(__file__).parent / "fixtures" / "h200"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_gpu_devices_from_real_output():
    output = (
        lines("proc-devices.txt") + [_SECTION] + lines("device-nodes.txt") + [_SECTION] + lines("driver-version.txt")
    )
    info = GpuDevices().process(output)
    assert info.majors["nvidia"] == 195
    assert info.majors["nvidia-uvm"] == 238  # dynamic: not the 509/510 configs hard-code
    assert info.driver == "580.159.04"
    uvm = next(node for node in info.nodes if node.path == "/dev/nvidia-uvm")
    assert uvm.major == info.majors["nvidia-uvm"] and info.gpu_count == 1


def test_gpu_status_from_real_nvidia_smi():
    (gpu,) = GpuStatus().process(lines("nvidia-smi-query.csv"))
    assert gpu.name == "NVIDIA H200" and gpu.memory_total_mib == 143771 and gpu.uuid.startswith("GPU-")


def test_device_holders_with_command_lines():
    output = [
        "/proc/4242/fd /dev/nvidia0",
        "/proc/4242/fd /dev/nvidiactl",
        "/proc/77/fd /dev/nvidia-uvm",
        _SECTION,
        "77 python3 rogue.py ",
        "4242 /opt/sglang/venvs/x/bin/python -m sglang.launch_server ",
    ]
    holders = {h.pid: h for h in DeviceHolders().process(output)}
    assert holders[4242].devices == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert holders[77].cmdline == "python3 rogue.py"
