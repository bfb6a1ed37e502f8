"""The container's user-space NVIDIA driver against the node's: read even when NVML refuses, named both."""

from sglang_pve.deploy.facts.gpu import UserSpaceDriver
from sglang_pve.deploy.preflight import driver


def test_the_user_space_driver_version_even_when_nvml_refuses_the_mismatch():
    fact = UserSpaceDriver()
    assert fact.process(["580.95.05", "580.95.05"]) == "580.95.05"
    assert (
        fact.process(["Failed to initialize NVML: Driver/library version mismatch", "NVML library version: 570.00.01"])
        == "570.00.01"
    )
    problem = driver.driver_problems("pve1", "580.95.05", "570.00.01")[0].render("sglang1")
    assert "is 570.00.01 but node pve1 runs 580.95.05" in problem and "Fix: install exactly 580.95.05" in problem
    assert "fails in the container" in driver.driver_problems("pve1", "580.95.05", "No devices were found")[0].message
