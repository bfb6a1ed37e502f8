"""A node's containers in one operation (provision/container.py containers): their create and
start tasks issued together and awaited together, as PVE runs them (a worker per task, a config
lock per vmid: pve-container src/PVE/API2/LXC.pm create_vm, API2/LXC/Status.pm vm_start); every
container's failure reported, the others converged."""

import os
import threading

import pytest

from lab.gpus import uvm_major
from lab.pve import requestlog
from lab.pve.backend import DirBackend
from lab.pve.testing import EmulatedNode, fake_gpu_devices
from sglang_pve.provision import hostkeys
from sglang_pve.provision.container import Guest, containers
from tests.unit import test_proxmox_provision as provision
from tests.unit.test_proxmox_provision import GPUS, NodeHost, execute, node_of, operation, spec_of

pve = provision.pve  # the fixture: PVE 8 and 9


class Together(DirBackend):
    """Each create and each start waits until the other container's has begun too: a node that
    awaited one task before it issued the next would leave the first waiting until it fails (60 s:
    the other request can come seconds later on a loaded machine, never a minute)."""

    def __init__(self, root, count: int):
        super().__init__(root, devices=fake_gpu_devices(uvm_major()))
        self.creates = threading.Barrier(count, timeout=60)
        self.starts = threading.Barrier(count, timeout=60)

    def create(self, *args, **kwargs):
        self.creates.wait()
        super().create(*args, **kwargs)

    def start(self, *args, **kwargs):
        self.starts.wait()
        super().start(*args, **kwargs)


def member(pve, tmp_path, vmid: int, **changes):
    net0 = {"bridge": "vmbr0", "ip": f"10.0.0.{vmid}/24", "gw": "10.0.0.1", "hwaddr": f"02:00:0A:00:00:{vmid:02X}"}
    spec = spec_of(pve, vmid=vmid, hostname=f"sglang{vmid}", net0=net0, **changes)
    return spec, Guest(f"10.0.0.{vmid}", str(tmp_path / "known_hosts"), host_name=f"sglang{vmid}")


@pytest.fixture
def together(tmp_path, monkeypatch):
    with EmulatedNode(tmp_path, backend=Together(tmp_path / "volumes", 2)) as emulated:
        monkeypatch.setenv("PATH", f"{emulated.bin_dir}{os.pathsep}{os.environ['PATH']}")
        yield emulated


def test_a_nodes_creates_and_starts_run_at_once(together, tmp_path):
    members = [member(together, tmp_path, 129, gpus=[0, 1, 2, 3]), member(together, tmp_path, 130, gpus=[4, 5, 6, 7])]
    host = NodeHost()
    commands = operation(containers, host, members=members, node=node_of(together), gpus=GPUS)
    assert len(commands) == 1  # one callback for the node's containers
    assert execute(host, commands) == [True], host.errors
    for vmid in (129, 130):
        assert together.node.backend.status(vmid) == "running"
        assert hostkeys.is_pinned(str(tmp_path / "known_hosts"), f"10.0.0.{vmid}")
    posts = [e["path"] for e in together.requests() if e["method"] == "POST" and "access" not in e["path"]]
    assert posts == ["/nodes/pve1/lxc"] * 2 + ["/nodes/pve1/lxc/129/status/start", "/nodes/pve1/lxc/130/status/start"]
    # each task's status read once, when the node's active task list no longer shows it running
    statuses = [e["path"] for e in together.requests() if e["method"] == "GET" and "/tasks/UPID" in e["path"]]
    assert len(statuses) == 4 and len(set(statuses)) == 4, statuses
    assert requestlog.schema_violations(together.requests()) == []
    again = NodeHost()
    assert operation(containers, again, members=members, node=node_of(together), gpus=GPUS) == []
    assert again.noops == [f"container {v} (sglang{v}) up to date and running" for v in (129, 130)]


def test_every_failed_create_is_reported_and_the_others_are_converged(pve, tmp_path):
    missing = {"template": "local:vztmpl/missing-12_amd64.tar.zst"}
    members = [member(pve, tmp_path, 129), member(pve, tmp_path, 130, **missing), member(pve, tmp_path, 131, **missing)]
    host = NodeHost()
    commands = operation(containers, host, members=members, node=node_of(pve), gpus=GPUS)
    assert execute(host, commands) == [False]
    assert [e.split(": task failed: ")[1].split(" (task log")[0] for e in host.errors] == [
        f"unable to create CT {vmid} - volume 'local:vztmpl/missing-12_amd64.tar.zst' does not exist"
        for vmid in (130, 131)
    ]
    assert pve.node.backend.status(129) == "running" and not pve.node.exists(130) and not pve.node.exists(131)
    assert hostkeys.is_pinned(str(tmp_path / "known_hosts"), "10.0.0.129")


def test_every_containers_refusal_comes_at_once_before_any_write(pve, tmp_path):
    members = [member(pve, tmp_path, 129), member(pve, tmp_path, 130), member(pve, tmp_path, 131)]
    with pytest.raises(Exception) as caught:
        operation(containers, NodeHost(), members=members, node=node_of(pve, token=True), gpus=GPUS)
    assert str(caught.value).count("an API token cannot configure device passthrough (devN)") == 3
    assert {e["method"] for e in pve.requests() if "access" not in e["path"]} == {"GET"}  # nothing written
