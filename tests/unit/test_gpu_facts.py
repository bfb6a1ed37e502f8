"""GPU facts parse what a real H200 host printed (captured by tests/gpu on the device machine).
The holders and nvidia-smi's numbers are the agent's: test_agent_holders.py, test_agent_gpus.py."""

from pathlib import Path

from sglang_pve.deploy.facts.gpu import _SECTION, GpuDevices

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
