"""Per-container GPU sets (config/gpu_sets.py): checked for a whole node before any change."""

import pytest
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config.gpu_sets import gpu_set_problems, wanted_gpus
from sglang_pve.config.proxmox import ContainerSpec
from sglang_pve.deploys.containers import refuse_gpu_sets
from sglang_pve.provision.desired import passthrough

EIGHT = list(range(8))
BASE = dict(
    node="pve1",
    hostname="c",
    template="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    unprivileged=True,
    cores=1,
    memory=512,
    rootfs={"storage": "local-zfs", "size_gb": 8},
    net0={"bridge": "vmbr0", "ip": "dhcp"},
)


def spec(vmid: int, gpus, shared: bool = False) -> ContainerSpec:
    return ContainerSpec(vmid=vmid, gpus=gpus, gpus_shared=shared, **BASE)


def test_disjoint_sets_and_no_gpu_pass():
    specs = {"a": spec(101, [0, 1]), "b": spec(102, [2, 3]), "c": spec(103, [4, 5, 6, 7]), "router": spec(104, [])}
    assert gpu_set_problems("pve1", EIGHT, specs) == []
    assert wanted_gpus(spec(105, "all"), [3, 1]) == [1, 3]


def test_every_problem_of_every_container_at_once():
    specs = {"a": spec(101, "all"), "b": spec(102, [1]), "c": spec(103, [8, 9]), "d": spec(104, [7, 2])}
    found = [(host, p.key, p.value, p.message) for host, p in gpu_set_problems("pve1", EIGHT, specs)]
    assert [(host, key, value) for host, key, value, _ in found] == [
        ("b", "container.gpus", [1]),
        ("c", "container.gpus", [8, 9]),
        ("d", "container.gpus", [7, 2]),
    ]
    assert "also go(es) to a" in found[0][3] and "GPU 2, 7" in found[2][3]
    assert "pve1 has 8 GPU(s) (indices 0, 1, 2, 3, 4, 5, 6, 7), not GPU 8, 9" in found[1][3]


def test_sharing_needs_both_to_say_so():
    assert gpu_set_problems("pve1", EIGHT, {"a": spec(101, [0], shared=True), "b": spec(102, [0], shared=True)}) == []
    one_sided = gpu_set_problems("pve1", EIGHT, {"a": spec(101, [0], shared=True), "b": spec(102, [0])})
    assert [(host, "gpus_shared: true on both b and a" in p.fix) for host, p in one_sided] == [("b", True)]


def test_the_node_refuses_with_host_key_value_and_fix():
    with pytest.raises(PyinfraError) as refused:
        refuse_gpu_sets("pve2", [0, 1], {"s1": spec(101, [0, 1]), "s2": spec(102, [1, 2])})
    text = str(refused.value)
    assert "invalid configuration for s2 (2 problem(s))" in text
    assert "s2: container.gpus = [1, 2]: pve2 has 2 GPU(s) (indices 0, 1), not GPU 2. Fix:" in text
    assert "s2: container.gpus = [1, 2]: GPU 1 of pve2 also go(es) to s1" in text
    refuse_gpu_sets("pve2", [0, 1], {"s1": spec(101, [0]), "s2": spec(102, [1])})  # fine: no raise


def test_a_container_without_gpus_gets_no_nvidia_node():
    assert passthrough(spec(101, []), EIGHT, {"nvidia": 195, "nvidia-uvm": 240}) == ({}, [], [])
    options, _, problems = passthrough(spec(101, [2, 3]), EIGHT, {"nvidia": 195, "nvidia-uvm": 240})
    assert problems == [] and [v.split(",")[0] for v in options.values()][:2] == ["/dev/nvidia2", "/dev/nvidia3"]
