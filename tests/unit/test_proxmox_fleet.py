"""A node's containers in one operation (provision/container.py containers): their create and
start tasks issued together and awaited together, as PVE runs them (a worker per task, a config
lock per vmid: pve-container src/PVE/API2/LXC.pm create_vm, API2/LXC/Status.pm vm_start); every
container's failure reported, the others converged."""

import os
import threading
from types import SimpleNamespace

import pytest
from pyinfra.api import OperationError
from pyinfra.context import ctx_host, ctx_state

from lab.gpus import uvm_major
from lab.pve import requestlog
from lab.pve.backend import DirBackend
from lab.pve.testing import EmulatedNode, fake_gpu_devices
from sglang_pve.config.errors import Problem
from sglang_pve.provision import container as container_module
from sglang_pve.provision import hostkeys
from sglang_pve.provision.container import Guest, containers, plan
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


def _as_run(member_name: str):
    """pyinfra's state as the node's operation sees it in a run whose inventory has `member_name`."""
    member_host = SimpleNamespace(name=member_name)
    inventory = SimpleNamespace(get_host=lambda name, default=None: member_host if name == member_name else default)
    return SimpleNamespace(config=SimpleNamespace(DIFF=False), inventory=inventory)


def test_a_fleet_members_restart_is_left_to_its_deploy_or_refused_before_any_write(pve, tmp_path, monkeypatch):
    """A replica that must restart (a [pve:pending] key): with rolled=True (deploy.py) the node writes
    and records the restart owed but does not reboot it; container.restart, what its own deploy calls
    once it left its router (fleet_restart.py), reboots it and clears the debt. With rolled=False
    (tasks/containers.py) the node's operation refuses before any write, naming the member."""
    spec, guest = member(pve, tmp_path, 129)
    node = node_of(pve)
    operation(containers, NodeHost(), members=[(spec, guest)], node=node, gpus=GPUS)  # created
    execute(NodeHost(), operation(containers, NodeHost(), members=[(spec, guest)], node=node, gpus=GPUS))
    node.api.request("PUT", "nodes/pve1/lxc/129/config", nameserver="10.0.0.1")  # pending: a restart is owed
    monkeypatch.setattr(container_module.fleet, "restart_path", lambda host: f"{host.name} rolls out of its router")
    monkeypatch.setattr(container_module.fleet, "restart_problem", lambda host, vmid, reasons, rolled: None)
    host = NodeHost()
    with ctx_host.use(host), ctx_state.use(_as_run("sglang129")):
        commands = list(containers._inner(members=[(spec, guest)], node=node_of(pve), gpus=GPUS, rolled=True))
    assert execute(host, commands) == [True], host.errors
    assert not [w for w in provision.writes(pve) if w.endswith("/status/reboot")]  # not rebooted by its node
    assert "[pve:pending]" in pve.conf_text(129) and provision.debt_file(pve)["keys"] == ["nameserver"]
    wanted = plan(spec, node_of(pve), GPUS, guest)
    assert wanted.needs_restart and wanted.debt is None  # the debt is the node's fact (NodeHost has none)
    assert container_module.restart(NodeHost(), node_of(pve), wanted, guest) is None
    assert provision.writes(pve)[-1] == "POST /nodes/pve1/lxc/129/status/reboot"
    assert "[pve:pending]" not in pve.conf_text(129) and provision.debt_file(pve) is None

    problem = Problem("replica_sets.llama.members", ["sglang129"], "container 129 (sglang129) must restart", "fix")
    monkeypatch.setattr(container_module.fleet, "restart_problem", lambda host, vmid, reasons, rolled: problem)
    node.api.request("PUT", "nodes/pve1/lxc/129/config", nameserver="10.0.0.2")
    before = provision.writes(pve)
    with ctx_host.use(NodeHost()), ctx_state.use(_as_run("sglang129")):
        with pytest.raises(OperationError, match=r"sglang129: replica_sets.llama.members = \['sglang129'\]: contai"):
            list(containers._inner(members=[(spec, guest)], node=node_of(pve), gpus=GPUS))
    assert provision.writes(pve) == before and provision.debt_file(pve) is None  # nothing written, nothing owed
