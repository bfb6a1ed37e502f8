"""The node preparation: the unit it renders, run through the lab's nvidia-modprobe (written from
NVIDIA's source, tests/unit/test_lab_nvidia_modprobe.py), leaves an 8-GPU node with the driver's
numbers; the node check names what is wrong; the deploy starts the unit and skips a missing
nvidia-persistenced.service with a warning."""

import os
import shlex
import stat
from types import SimpleNamespace

import pytest

from lab.sglang_sim import nvidia_modprobe
from sglang_pve.agent.gpus import DeviceNode
from sglang_pve.deploy.facts.files import FileState
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.deploys import node_prep as node_prep_deploy
from sglang_pve.provision import device_nodes
from sglang_pve.provision.node_prep import DEVICE_NODES_UNIT, MODULES_LOAD, node_prep_files

UVM = 238
MAJORS = {"nvidia": 195, "nvidiactl": 195, "nvidia-uvm": UVM}
PROC_DEVICES = f"Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n{UVM} nvidia-uvm\n\nBlock devices:\n"
EIGHT = GpuDeviceInfo(MAJORS, [], "580.159.04", driver_minors=list(range(8)))
# what the unit ran before (git show f4ef174:sglang_pve/provision/node_prep.py)
OLD_EXEC = ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-modprobe -u " + " ".join(f"-c={m}" for m in range(8))]


def exec_lines(gpus: GpuDeviceInfo) -> list[str]:
    unit = node_prep_files(gpus)[1]
    assert unit.path == f"/etc/systemd/system/{DEVICE_NODES_UNIT}"
    return [line.split("=", 1)[1] for line in unit.content.splitlines() if line.startswith("ExecStart=")]


def run_unit(commands: list[str], root) -> list[DeviceNode]:
    """ExecStart= lines in order, as systemd runs a oneshot (stops at the first failure); the
    nodes they leave."""
    for command in commands:
        argv = shlex.split(command)
        if argv[0] != "/usr/bin/nvidia-modprobe":
            continue  # nvidia-smi: makes no node here (NVML is closed source; see lab/sglang_sim/nvidia_smi.py)
        assert nvidia_modprobe.main(argv, root=str(root)) == 0, command
    found = []
    for path in sorted((root / "dev").rglob("*")):
        info = os.lstat(path)
        if stat.S_ISCHR(info.st_mode):
            found.append(DeviceNode(f"/{path.relative_to(root)}", os.major(info.st_rdev), os.minor(info.st_rdev)))
    return found


@pytest.fixture
def node_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root (the lab runs as root)")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text(PROC_DEVICES)
    (tmp_path / "dev/char").mkdir(parents=True)
    return tmp_path


def test_the_unit_makes_every_node_once_and_the_uvm_pair_at_0_and_1():
    assert exec_lines(EIGHT) == [
        "/usr/bin/nvidia-modprobe " + " ".join(f"-c={m}" for m in [*range(8), 255]),
        "/usr/bin/nvidia-modprobe -u -c=0",
    ]
    unit = node_prep_files(EIGHT)[1].content
    assert "Before=pve-guests.service" in unit and "WantedBy=multi-user.target" in unit


def test_the_unit_on_an_8_gpu_node_leaves_uvm_at_minor_0_and_tools_at_1(node_root):
    found = run_unit(exec_lines(EIGHT), node_root)
    numbers = {n.path: (n.major, n.minor) for n in found}
    assert numbers["/dev/nvidia-uvm"] == (UVM, 0) and numbers["/dev/nvidia-uvm-tools"] == (UVM, 1)
    assert device_nodes.problems(GpuDeviceInfo(MAJORS, found, "580.159.04", driver_minors=list(range(8)))) == []
    assert sorted(numbers) == sorted(
        [*(f"/dev/nvidia{i}" for i in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    )


def test_the_old_command_leaves_uvm_at_minor_7_which_the_node_check_refuses(node_root):
    found = run_unit(OLD_EXEC, node_root)
    assert {n.path: n.minor for n in found} == {"/dev/nvidia-uvm": 7, "/dev/nvidia-uvm-tools": 8}
    problems = device_nodes.problems(GpuDeviceInfo(MAJORS, found, None, driver_minors=list(range(8))))
    rendered = {p.key: p.render("pve1") for p in problems}
    assert rendered["/dev/nvidia-uvm"].startswith(
        "pve1: /dev/nvidia-uvm = 'c 238:7': it must be the character device 238:0 (nvidia-uvm major from /proc/devices)"
    )
    assert (
        f"Fix: run the node preparation (tasks/pve_host.py), or on the node: systemctl restart {DEVICE_NODES_UNIT}"
        in (rendered["/dev/nvidia-uvm-tools"])
    )
    assert rendered["/dev/nvidia0"].startswith("pve1: /dev/nvidia0 = 'missing': it must be the character device 195:0")


def test_the_node_check_needs_the_uvm_module_and_trusts_the_drivers_gpu_list():
    problems = device_nodes.problems(GpuDeviceInfo({"nvidia": 195}, [], None, driver_minors=[0]))
    assert [(p.key, p.value) for p in problems] == [
        ("/proc/devices", "nvidia-uvm"),
        ("/dev/nvidia0", "missing"),
        ("/dev/nvidiactl", "missing"),
    ]
    assert "modprobe nvidia_uvm on the node" in problems[0].fix
    assert device_nodes.problems(GpuDeviceInfo({}, [], None)) == []  # no GPU: nothing to pass


@pytest.fixture
def prepared(monkeypatch):
    """prepare_node's operations on a node with ``gpus`` (and its files as the node's one read
    found them), recorded instead of run: the units.running call's arguments and the warnings."""
    calls, warnings = [], []
    monkeypatch.setattr(node_prep_deploy, "is_node", lambda: True)
    monkeypatch.setattr(node_prep_deploy.files, "file_set", lambda **kwargs: calls.append(("file_set", kwargs)))
    monkeypatch.setattr(node_prep_deploy.units, "running", lambda **kwargs: calls.append(("running", kwargs)))
    monkeypatch.setattr(node_prep_deploy.logger, "warning", warnings.append)
    monkeypatch.setattr(node_prep_deploy, "host", SimpleNamespace(name="pve1"))

    def run(gpus: GpuDeviceInfo, file_changes: bool = False):
        calls.clear()
        warnings.clear()
        on_node = {f.path: FileState(f.sha1, f.mode, f.user, f.group) for f in node_prep_files(gpus)}
        if file_changes:
            on_node[MODULES_LOAD] = None
        monkeypatch.setattr(node_prep_deploy, "node_gpus", lambda: gpus)
        monkeypatch.setattr(node_prep_deploy, "node_read", lambda: SimpleNamespace(files=on_node))
        node_prep_deploy.prepare_node._inner()
        [units] = [kwargs for kind, kwargs in calls if kind == "running"]
        return units, list(warnings)

    return run


def right_nodes(minors) -> list[DeviceNode]:
    return [DeviceNode(f"/dev/nvidia{i}", 195, i) for i in minors] + [
        DeviceNode("/dev/nvidiactl", 195, 255),
        DeviceNode("/dev/nvidia-uvm", UVM, 0),
        DeviceNode("/dev/nvidia-uvm-tools", UVM, 1),
    ]


def test_the_deploy_starts_the_unit_and_restarts_it_only_when_needed(prepared):
    good = GpuDeviceInfo(MAJORS, right_nodes(range(8)), None, list(range(8)), "loaded")
    units, warnings = prepared(good)
    assert units["units"] == ["nvidia-persistenced.service", DEVICE_NODES_UNIT] and warnings == []
    assert (units["restarted"], units["daemon_reload"]) == ([], False)
    units, _ = prepared(good, file_changes=True)
    assert units["restarted"] == [DEVICE_NODES_UNIT] and units["daemon_reload"]
    assert units["name"].endswith(f"{DEVICE_NODES_UNIT} run again (its files changed)")
    missing_pair = GpuDeviceInfo(MAJORS, right_nodes(range(8))[:-2], None, list(range(8)), "loaded")
    units, _ = prepared(missing_pair)
    assert units["restarted"] == [DEVICE_NODES_UNIT] and not units["daemon_reload"]
    assert "(/dev/nvidia-uvm, /dev/nvidia-uvm-tools not as the driver numbers them)" in units["name"]


def test_a_node_without_nvidia_persistenced_is_warned_not_failed(prepared):
    units, warnings = prepared(GpuDeviceInfo(MAJORS, right_nodes(range(8)), None, list(range(8)), "not-found"))
    assert units["units"] == [DEVICE_NODES_UNIT]
    assert len(warnings) == 1 and warnings[0].startswith(
        "pve1: nvidia-persistenced.service is not installed (systemd LoadState: not-found)"
    )
    assert "Fix: install its unit with NVIDIA's nvidia-persistenced init/install.sh" in warnings[0]


def test_the_check_when_executed_reads_the_node_again_and_fails_it_while_a_node_is_wrong():
    """device_nodes.present's callback: after the unit ran, a fresh GpuDevices decides."""

    class Node:
        name = "pve1"

        def __init__(self, gpus):
            self.gpus, self.errors = gpus, []

        def get_fact(self, fact):
            return self.gpus

        def log_styled(self, message, **kwargs):
            self.errors.append(message)

    fixed = Node(GpuDeviceInfo(MAJORS, right_nodes(range(8)), None, list(range(8))))
    assert device_nodes._check(None, fixed) is True and fixed.errors == []
    still = Node(GpuDeviceInfo(MAJORS, right_nodes(range(8))[:-1], None, list(range(8))))
    assert device_nodes._check(None, still) is False
    assert "invalid configuration for pve1 (1 problem(s))" in still.errors[0]
    assert "pve1: /dev/nvidia-uvm-tools = 'missing'" in still.errors[0]
