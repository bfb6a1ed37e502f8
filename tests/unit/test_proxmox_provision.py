"""Provisioning against the in-process Proxmox emulator (lab.pve, DirBackend, the real schema):
create, converge, no-change reads, snapshot before change, rollback, token refusals, API faults;
the container and snapshot_rollback operations themselves (what they yield, their noop, their
refusals, their --diff lines; their callback run as pyinfra runs it). Every request the toolkit
makes passes the schema (the emulator's request log). These operations do their work in a
callback against the Proxmox API, so tests/unit/test_json_cases.py cannot express them."""

import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from pyinfra.api import FunctionCommand, OperationError, StringCommand
from pyinfra.context import ctx_host, ctx_state

from lab.pve import requestlog
from lab.pve.testing import PASSWORD, TOKEN_SECRET, EmulatedNode
from sglang_pve.agent.gpus import DeviceNode
from sglang_pve.config import ConfigError
from sglang_pve.config.proxmox import load_api_settings, load_container
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.provision import conffile, desired, hostkeys, snapshot_rollback, snapshots
from sglang_pve.provision.client import ProxmoxError, connect
from sglang_pve.provision.container import Guest, _apply, container, plan
from sglang_pve.provision.credentials import Credential
from sglang_pve.provision.node_facts import NodeFacts
from sglang_pve.provision.nodes import Node
from tests.unit.proxmox_data import CONTAINER
from tests.unit.test_proxmox_conffile import wait_until_blocked_on

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl root@sglang1"
GPUS = GpuDeviceInfo(
    {"nvidia": 195, "nvidia-uvm": 510},
    [DeviceNode(f"/dev/nvidia{i}", 195, i) for i in range(8)] + [DeviceNode("/dev/nvidiactl", 195, 255)],
    "580.95.05",
)


class NodeHost:
    """The node as the operation's callback sees it: shell commands run here (the raw-line edit on
    the emulator's config dir), `pct exec ... cat <host key>` answers the container's key."""

    name = "pve1"
    print_prefix = "[pve1] "

    def __init__(self, nodename: str = "pve1"):
        self.errors, self.noops = [], []
        self.nodename = nodename  # `uname -n` on it

    def noop(self, description):
        self.noops.append(description)

    def run_shell_command(self, command):
        text = command.get_raw_value()
        if text.startswith("pct exec"):
            return True, type("Out", (), {"stdout": HOST_KEY + "\n", "stderr": ""})()
        result = subprocess.run(["sh", "-c", text], capture_output=True, text=True)
        return result.returncode == 0, type("Out", (), {"stdout": result.stdout, "stderr": result.stderr})()

    def get_fact(self, fact, **kwargs):
        """A fact as pyinfra gets it: its command run here (`zfs`: the emulator's, on the test's
        PATH); NodeFacts' uname -n answers `nodename`."""
        ok, output = self.run_shell_command(StringCommand(fact().command(**kwargs)))
        found = fact().process(output.stdout.splitlines())
        return dataclasses.replace(found, hostname=self.nodename) if fact is NodeFacts else found

    def log(self, *args, **kwargs):
        pass

    def log_styled(self, message, **kwargs):
        self.errors.append(message)


@pytest.fixture(params=[8, 9], ids=["pve8", "pve9"])
def pve(tmp_path, request, monkeypatch):
    """PVE 8 and PVE 9: each request is checked against that version's real schema; the node's
    `zfs` (lab/pve/zfs.py) first on PATH."""
    with EmulatedNode(tmp_path, version=request.param) as emulated:
        monkeypatch.setenv("PATH", f"{emulated.bin_dir}{os.pathsep}{os.environ['PATH']}")
        yield emulated


def node_of(pve, token=False, **settings) -> Node:
    secret = {"token_name": "deploy", "token_env": "T"} if token else {"password_env": "P"}
    api = load_api_settings(
        "pve1", {"proxmox_api": {"host": "127.0.0.1", "port": pve.port, "ca_file": str(pve.cert), **secret, **settings}}
    )
    credential = Credential("root@pam", "deploy" if token else None, TOKEN_SECRET if token else PASSWORD, "test")
    return Node(
        "pve1",
        api,
        etc_pve=str(pve.state_root),
        lock_dir=str(pve.lock_dir),
        debt_dir=str(pve.state_root / "restart-owed"),
        _api=connect(api, credential),
    )


def spec_of(pve, **changes):
    return load_container("sglang1", {"container": CONTAINER | {"template": pve.TEMPLATE} | changes})


def converge(pve, node, spec, guest) -> NodeHost:
    """Plan (what prepare does) and apply (what execute does); the node host records errors."""
    wanted = plan(spec, node, GPUS, guest)
    host = NodeHost()
    _apply(None, host, node, wanted, guest)
    return host


def writes(pve) -> list[str]:
    return [
        f"{e['method']} {e['path']}"
        for e in pve.requests()
        if e["method"] != "GET" and not e["path"].endswith("/access/ticket")
    ]


@pytest.fixture
def guest(tmp_path):
    return Guest(ssh_hostname="10.0.0.129", known_hosts=str(tmp_path / "known_hosts"))


def test_created_from_nothing_then_a_second_run_only_reads(pve, guest):
    node = node_of(pve)
    host = converge(pve, node, spec_of(pve), guest)
    assert host.errors == []
    assert pve.node.backend.status(129) == "running"
    conf = pve.conf_text(129)
    assert "dev9: /dev/nvidia-uvm,mode=0666" in conf and "unprivileged: 1" not in conf
    assert "lxc.mount.entry: /tank/shared shared none bind,ro,create=dir 0 0" in conf
    assert hostkeys.is_pinned(guest.known_hosts, "10.0.0.129")
    assert requestlog.schema_violations(pve.requests()) == []

    before = len(pve.requests())
    fresh = node_of(pve)  # a new run: nothing cached
    again = plan(spec_of(pve), fresh, GPUS, guest)
    assert again.idle
    reads = [e for e in pve.requests()[before:] if not e["path"].endswith("/access/ticket")]
    assert [f"{e['method']} {e['path']}" for e in reads] == [
        "GET /nodes/pve1/lxc",
        "GET /nodes/pve1/lxc/129/config",
        "GET /nodes/pve1/lxc/129/pending",
    ]
    assert reads[1]["params"].get("current") in (1, "1")  # the running config, not the pending one


def test_a_change_takes_a_snapshot_then_only_the_differing_key(pve, guest):
    node = node_of(pve)
    converge(pve, node, spec_of(pve), guest)
    start = len(pve.requests())
    wanted = plan(spec_of(pve, cores=96), node_of(pve), GPUS, guest)
    assert wanted.diff.lines() == ["cores: 64 -> 96"] and not wanted.needs_restart
    host = NodeHost()
    _apply(None, host, node, wanted, guest)
    assert host.errors == []
    changes = [
        (e["method"], e["path"], sorted(e["params"]))
        for e in pve.requests()[start:]
        if e["method"] != "GET" and e["path"] != "/access/ticket"
    ]
    assert [c[:2] for c in changes] == [("POST", "/nodes/pve1/lxc/129/snapshot"), ("PUT", "/nodes/pve1/lxc/129/config")]
    assert changes[1][2] == ["cores", "digest"]  # only the differing key, with the digest
    taken = snapshots.listed(node, 129)
    assert len(taken) == 1 and taken[0]["name"].startswith("sgpve-") and taken[0]["name"].endswith("-config")
    assert taken[0]["description"] == "sglang-pve: before changing cores"
    assert "cores: 96" in pve.conf_text(129)
    assert requestlog.schema_violations(pve.requests()) == []


def calls_into_desired(run) -> list[tuple[str, bool]]:
    """(function, called from outside desired.py) for every call of a desired.py function while
    `run` runs (sys.setprofile: also what another module imported by name)."""
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == desired.__file__:
            calls.append((frame.f_code.co_name, frame.f_back.f_code.co_filename != desired.__file__))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def test_one_plan_builds_the_desired_config_once_and_the_rest_consumes_it(pve, guest):
    def once(spec) -> None:
        calls = calls_into_desired(lambda: plan(spec, node_of(pve), GPUS, guest))
        assert [name for name, outside in calls if outside] == ["build"]
        assert [name for name, _ in calls].count("wanted_config") == 1
        assert [name for name, _ in calls].count("wanted_raw_lines") == 1

    once(spec_of(pve))  # absent: the create call
    converge(pve, node_of(pve), spec_of(pve), guest)
    once(spec_of(pve, cores=96))  # present: the diff


def test_a_concurrent_edit_is_reported_not_overwritten(pve, guest):
    node = node_of(pve)
    converge(pve, node, spec_of(pve), guest)
    wanted = plan(spec_of(pve, cores=96), node_of(pve), GPUS, guest)
    node_of(pve).api.request("PUT", "nodes/pve1/lxc/129/config", memory=1024)  # someone else, meanwhile
    host = NodeHost()
    assert _apply(None, host, node, wanted, guest) is False
    assert host.errors == [
        "PUT /nodes/pve1/lxc/129/config: not sent: the config changed since it was read (someone "
        "else edited it); nothing was overwritten: run again to review the new state"
    ]
    assert "cores: 64" in pve.conf_text(129) and "memory: 1024" in pve.conf_text(129)


def test_a_token_may_not_set_devices_and_nothing_is_written(pve, guest):
    with pytest.raises(ConfigError) as caught:
        plan(spec_of(pve), node_of(pve, token=True), GPUS, guest)
    assert "an API token cannot configure device passthrough (devN)" in str(caught.value)
    assert "Fix: use root@pam with a password" in str(caught.value)
    assert writes(pve) == []


@pytest.mark.parametrize(
    "fault, call, message",
    [
        (
            {
                "method": "POST",
                "path": "/nodes/*/lxc/*/status/start",
                "task_error": "startup for container '129' failed",
            },
            "POST /nodes/pve1/lxc/129/status/start",
            "task failed: startup for container '129' failed",
        ),
        (
            {"method": "POST", "path": "/nodes/*/lxc", "http_status": 500, "message": "got timeout", "times": 1},
            "POST /nodes/pve1/lxc",
            "500 got timeout",
        ),
    ],
)
def test_an_api_fault_names_the_call_and_the_rerun_converges(pve, guest, fault, call, message):
    pve.faults([fault])
    host = converge(pve, node_of(pve), spec_of(pve), guest)
    assert len(host.errors) == 1 and host.errors[0].startswith(f"{call}: ") and message in host.errors[0]
    pve.faults([])
    assert converge(pve, node_of(pve), spec_of(pve), guest).errors == []
    assert plan(spec_of(pve), node_of(pve), GPUS, guest).idle
    assert requestlog.schema_violations(pve.requests()) == []


def test_no_answer_in_time_names_the_call(pve, guest):
    pve.faults([{"path": "/nodes/*/lxc", "delay_s": 3}])
    with pytest.raises(ProxmoxError) as caught:
        plan(spec_of(pve), node_of(pve, timeout_s=1), GPUS, guest)
    assert (
        str(caught.value)
        == "GET /nodes/pve1/lxc: no answer from 127.0.0.1:%d within 1s (proxmox_api.timeout_s)" % pve.port
    )


def test_a_change_without_an_answer_says_it_may_still_happen_and_the_rerun_converges(pve, guest):
    """A POST whose answer is lost (CI: a start's, on the lab's bridge) may have reached the node: the
    error says so, and the rerun reads the state (the container started after all) and converges."""
    pve.faults([{"method": "POST", "path": "/nodes/*/lxc/*/status/start", "delay_s": 2, "times": 1}])
    host = converge(pve, node_of(pve, timeout_s=1), spec_of(pve), guest)
    assert host.errors == [
        f"POST /nodes/pve1/lxc/129/status/start: no answer from 127.0.0.1:{pve.port} within 1s "
        "(proxmox_api.timeout_s); the node may still carry out this POST: run again, which reads what the "
        "node has before it changes anything"
    ]
    _started_without_its_caller(pve, 129)
    assert converge(pve, node_of(pve), spec_of(pve), guest).errors == []
    assert plan(spec_of(pve), node_of(pve), GPUS, guest).idle


def _started_without_its_caller(pve, vmid: int, timeout_s: float = 60) -> None:
    """Wait for the start the node carries out after its caller gave up (its task, once it ends)."""
    deadline = time.monotonic() + timeout_s
    while not (starts := [t for t in pve.node.tasks.newest_first() if t.info["type"] == "vzstart"]):
        assert time.monotonic() < deadline, "the delayed start never reached the node"
        time.sleep(0.05)
    assert pve.wait(starts[0].upid)["exitstatus"] == "OK"


def test_raw_passthrough_writes_cgroup_and_mount_lines_keeping_the_rest(pve, guest):
    node = node_of(pve)
    assert converge(pve, node, spec_of(pve, passthrough="raw"), guest).errors == []
    conf = pve.conf_text(129)
    assert "lxc.cgroup2.devices.allow: c 510:0 rw" in conf and "dev0:" not in conf
    assert "lxc.mount.entry: /dev/nvidia7 dev/nvidia7 none bind,optional,create=file" in conf
    assert plan(spec_of(pve, passthrough="raw"), node_of(pve), GPUS, guest).idle


def test_rollback_restores_the_config_and_retention_keeps_the_newest(pve, guest):
    converge(pve, node_of(pve), spec_of(pve, snapshots_keep=2), guest)
    for cores in (70, 80, 90):
        assert converge(pve, node_of(pve), spec_of(pve, cores=cores, snapshots_keep=2), guest).errors == []
    node = node_of(pve)
    kept = [s["name"] for s in snapshots.listed(node, 129)]
    assert len(kept) == 2
    assert snapshots.rollback(node, 129, None) == kept[-1]
    assert "cores: 80" in pve.conf_text(129)
    assert pve.node.backend.status(129) == "running"
    with pytest.raises(ProxmoxError) as caught:  # local-zfs: only the most recent snapshot
        snapshots.rollback(node, 129, kept[0])
    assert "On ZFS, Proxmox rolls back only to the most recent snapshot" in str(caught.value)
    assert f"Fix: roll back to {kept[-1]}" in str(caught.value)


def operation(op, host, diff=False, **kwargs) -> list:
    """What the operation yields on `host`, as pyinfra's prepare step calls it."""
    with ctx_host.use(host), ctx_state.use(SimpleNamespace(config=SimpleNamespace(DIFF=diff))):
        return list(op._inner(**kwargs))


def execute(host, commands) -> list:
    """Run the yielded callbacks as pyinfra's execute step does; their results."""
    assert all(isinstance(c, FunctionCommand) for c in commands)
    return [c.function(None, host, *c.args, **c.kwargs) for c in commands]


def test_container_operation_creates_once_then_is_a_noop(pve, guest, caplog):
    caplog.set_level(logging.INFO)
    host = NodeHost()
    commands = operation(container, host, diff=True, spec=spec_of(pve), node=node_of(pve), gpus=GPUS, guest=guest)
    assert len(commands) == 1 and writes(pve) == []  # prepared, nothing written yet
    assert "[pve1] Will create container 129 (sglang1) on pve1" in caplog.text
    assert "    cores: (unset) -> 64" in caplog.text
    assert execute(host, commands) == [True] and host.errors == []
    assert pve.node.backend.status(129) == "running"
    again = NodeHost()
    assert operation(container, again, spec=spec_of(pve), node=node_of(pve), gpus=GPUS, guest=guest) == []
    assert again.noops == ["container 129 (sglang1) up to date and running"]


def test_container_operation_says_when_a_change_needs_a_restart(pve, guest, caplog):
    caplog.set_level(logging.INFO)
    converge(pve, node_of(pve), spec_of(pve), guest)
    spec = spec_of(pve, features={"nesting": False})
    host = NodeHost()
    commands = operation(container, host, diff=True, spec=spec, node=node_of(pve), gpus=GPUS, guest=guest)
    assert "[pve1] Will modify container 129 (sglang1) on pve1" in caplog.text
    assert "    (restart: features only apply at start)" in caplog.text
    assert execute(host, commands) == [True], host.errors
    assert "features: nesting=0" in pve.conf_text(129)
    quiet = NodeHost()
    caplog.clear()
    assert operation(container, quiet, spec=spec_of(pve, cores=96), node=node_of(pve), gpus=GPUS, guest=guest)
    assert "Will modify" not in caplog.text  # the diff lines only under --diff


def test_container_operation_refuses_what_the_api_token_may_not_do(pve, guest):
    with pytest.raises(OperationError) as caught:
        operation(container, NodeHost(), spec=spec_of(pve), node=node_of(pve, token=True), gpus=GPUS, guest=guest)
    assert "an API token cannot configure device passthrough (devN)" in str(caught.value)
    assert writes(pve) == []


def test_container_operation_reports_a_failed_write_through_its_callback(pve, guest):
    pve.faults([{"method": "POST", "path": "/nodes/*/lxc", "http_status": 500, "message": "got timeout"}])
    host = NodeHost()
    commands = operation(container, host, spec=spec_of(pve), node=node_of(pve), gpus=GPUS, guest=guest)
    assert execute(host, commands) == [False]
    assert host.errors and host.errors[0].startswith("POST /nodes/pve1/lxc: ") and "got timeout" in host.errors[0]


def test_snapshot_rollback_operation_goes_to_the_newest_or_the_named_snapshot(pve, guest, caplog):
    caplog.set_level(logging.INFO)
    converge(pve, node_of(pve), spec_of(pve, snapshots_keep=3), guest)
    for cores in (70, 80):
        assert converge(pve, node_of(pve), spec_of(pve, cores=cores, snapshots_keep=3), guest).errors == []
    spec, node = spec_of(pve, snapshots_keep=3), node_of(pve)
    names = [s["name"] for s in snapshots.listed(node, 129)]
    host = NodeHost()
    commands = operation(snapshot_rollback.rolled_back, host, diff=True, spec=spec, node=node, on_node=host)
    assert [c.args[1:] for c in commands] == [(129, names[-1])]
    assert f"[pve1] Will roll back container 129 to {names[-1]}" in caplog.text and "newer snapshots" not in caplog.text
    assert execute(host, commands) == [True] and "cores: 70" in pve.conf_text(129)

    caplog.clear()  # without the node in the run (--limit): prepared, and Proxmox refuses it
    older = operation(snapshot_rollback.rolled_back, NodeHost(), diff=True, spec=spec, node=node, snapshot=names[0])
    assert f"to {names[0]} (newer snapshots: {names[1]})" in caplog.text
    failed = NodeHost()
    assert execute(failed, older) == [False]  # local-zfs: only the most recent one
    assert "On ZFS, Proxmox rolls back only to the most recent snapshot" in failed.errors[0]
    start = len(writes(pve))
    with pytest.raises(OperationError) as caught:  # with the node: refused before any write
        operation(
            snapshot_rollback.rolled_back, NodeHost(), spec=spec, node=node, snapshot=names[0], on_node=NodeHost()
        )
    assert str(caught.value) == (
        f"pve1: container 129 cannot be rolled back to {names[0]}: On ZFS, Proxmox rolls back only to the most "
        f"recent snapshot, and {names[0]} has newer ones: {names[1]}. Fix: roll back to {names[1]}, or delete the "
        "newer Proxmox snapshots (pct delsnapshot 129 NAME, newest first) and run again"
    )
    assert len(writes(pve)) == start


def test_snapshot_rollback_operation_refuses_a_snapshot_that_is_not_there(pve, guest):
    converge(pve, node_of(pve), spec_of(pve), guest)
    spec, node = spec_of(pve), node_of(pve)
    with pytest.raises(OperationError) as caught:
        operation(snapshot_rollback.rolled_back, NodeHost(), spec=spec, node=node)
    assert str(caught.value) == (
        "pve1: container 129 has no snapshot None; the toolkit takes one before every config change"
    )
    converge(pve, node_of(pve), spec_of(pve, cores=70), guest)
    [name] = [s["name"] for s in snapshots.listed(node, 129)]
    with pytest.raises(OperationError) as caught:
        operation(snapshot_rollback.rolled_back, NodeHost(), spec=spec, node=node_of(pve), snapshot="nope")
    assert str(caught.value) == (
        f"pve1: container 129 has no snapshot 'nope' (it has: {name}). Fix: --data snapshot=NAME with one of them"
    )


@pytest.mark.parametrize("lock", ["backup", "create", "migrate", "snapshot"])
def test_a_locked_container_refuses_the_run_with_nothing_written(pve, guest, lock):
    converge(pve, node_of(pve), spec_of(pve), guest)
    pve.node.set_lock(129, lock)  # a vzdump, a half-done create, a migration, a snapshot meanwhile
    before, start = pve.conf_text(129), len(pve.requests())
    for spec in (spec_of(pve, cores=96), spec_of(pve, passthrough="raw")):  # an API change, a raw edit
        with pytest.raises(OperationError) as caught:
            operation(container, NodeHost(), spec=spec, node=node_of(pve), gpus=GPUS, guest=guest)
        assert f"container 129 on node pve1 is locked ({lock})" in str(caught.value)
        assert "only if you know it is gone (a crashed backup, a half-done create), run `pct unlock 129`" in str(
            caught.value
        )
    assert {e["method"] for e in pve.requests()[start:] if not e["path"].endswith("/access/ticket")} == {"GET"}
    assert pve.conf_text(129) == before  # same digest: nothing written
    again = NodeHost()  # nothing to change: a locked container is no reason to fail
    assert operation(container, again, spec=spec_of(pve), node=node_of(pve), gpus=GPUS, guest=guest) == []


def test_the_raw_edit_goes_through_the_nodes_own_directory_and_the_link_still_resolves(pve, guest):
    converge(pve, node_of(pve), spec_of(pve), guest)
    host = converge(pve, node_of(pve), spec_of(pve, passthrough="raw"), guest)
    assert host.errors == []
    written = pve.state_root / "nodes/pve1/lxc/129.conf"
    assert "lxc.cgroup2.devices.allow: c 510:0 rw" in written.read_text()
    assert (pve.state_root / "lxc").resolve() == written.parent.resolve()  # /etc/pve/lxc -> nodes/pve1/lxc
    assert sorted(p.name for p in written.parent.iterdir()) == ["129.conf"]  # no temp file left


def test_a_put_waits_while_the_raw_edit_holds_pves_lock_and_both_edits_survive(pve, guest):
    """The raw edit's read-check-rename holds the CT's flock (conffile.lock_config, as on the node);
    an API write meanwhile waits for it and then applies to the edited file: nothing is lost."""
    converge(pve, node_of(pve), spec_of(pve), guest)
    path, node = pve.node.conf_path(129), node_of(pve)
    with conffile.lock_config(node.lock_path(129)):  # what conffile.main holds on the node
        text = path.read_text()
        put = threading.Thread(target=lambda: node_of(pve).api.request("PUT", node.path(129, "config"), memory=1024))
        put.start()
        put.join(0.5)
        assert put.is_alive() and "memory: 1024" not in path.read_text()  # waiting for our lock
        conffile.write_atomically(str(path), conffile.edit(text, [], ["lxc.apparmor.profile: unconfined"]).encode())
    put.join()
    assert "memory: 1024" in path.read_text() and "lxc.apparmor.profile: unconfined" in path.read_text()
    assert requestlog.schema_violations(pve.requests()) == []


def test_an_api_write_during_the_raw_edit_is_not_lost(pve, guest):
    """The other way round: an emulator writer holds the lock when the raw edit starts; the edit
    waits, sees the digest it planned with is gone, refuses; the rerun applies it on top."""
    converge(pve, node_of(pve), spec_of(pve), guest)
    one_mount = spec_of(pve, mounts=[{"host": "/tank/shared", "path": "/shared"}], snapshots_keep=0)  # raw only
    wanted = plan(one_mount, node_of(pve), GPUS, guest)
    node = node_of(pve)
    node.config(129)  # the digest the raw edit will send: read before the other writer writes
    with pve.node.locked(129):
        edit = threading.Thread(target=_apply, args=(None, host := NodeHost(), node, wanted, guest))
        edit.start()
        wait_until_blocked_on(pve.lock_dir / "pve-config-129.lock")
        _, config = pve.node.read(129)
        config.current["tags"] = "operator"
        pve.node.write(129, config)  # PVE's own write (an operator's `pct set --tags`), under its lock
    edit.join()
    assert len(host.errors) == 1 and "changed since it was read" in host.errors[0]
    assert "tags: operator" in pve.conf_text(129) and "/tank/data" in pve.conf_text(129)
    assert converge(pve, node_of(pve), one_mount, guest).errors == []
    assert "tags: operator" in pve.conf_text(129) and "/tank/data" not in pve.conf_text(129)


def test_the_raw_edit_is_refused_when_the_ssh_host_is_another_node(pve, guest):
    converge(pve, node_of(pve), spec_of(pve), guest)
    start = len(pve.requests())
    with pytest.raises(OperationError) as caught:
        operation(
            container, NodeHost("pve2"), spec=spec_of(pve, passthrough="raw"), node=node_of(pve), gpus=GPUS, guest=guest
        )
    assert "container 129 lives on node pve1 (its API) but this SSH host is node pve2 (uname -n)" in str(caught.value)
    assert "Fix: point this inventory host's ssh_hostname at node pve1" in str(caught.value)
    assert {e["method"] for e in pve.requests()[start:] if not e["path"].endswith("/access/ticket")} == {"GET"}
    commands = operation(  # an API-only change needs no shell on the node: allowed from anywhere
        container, NodeHost("pve2.example.org"), spec=spec_of(pve, cores=96), node=node_of(pve), gpus=GPUS, guest=guest
    )
    assert len(commands) == 1


def debt_file(pve):
    path = pve.state_root / "restart-owed" / "129.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_start_only_change_whose_reboot_failed_is_restarted_by_the_rerun_which_says_why(pve, guest, caplog):
    """hostname is written to the config at once (LXC_FASTPLUG_OPTIONS) and acts only at start: after a
    failed reboot nothing in Proxmox shows it; the record on the node does."""
    converge(pve, node_of(pve), spec_of(pve), guest)
    pve.faults([{"method": "POST", "path": "/nodes/*/lxc/*/status/reboot", "task_error": "shutdown timed out"}])
    failed = converge(pve, node_of(pve), spec_of(pve, hostname="llm2"), guest)
    assert (
        failed.errors and "POST /nodes/pve1/lxc/129/status/reboot: task failed: shutdown timed out" in failed.errors[0]
    )
    assert "hostname: llm2" in pve.conf_text(129) and "[pve:pending]" not in pve.conf_text(129)
    record = debt_file(pve)
    assert record["keys"] == ["hostname"] and record["marker"] == "Managed by sglang-pve" and record["vmid"] == 129

    pve.faults([])
    caplog.set_level(logging.INFO)
    host = NodeHost()
    commands = operation(
        container, host, diff=True, spec=spec_of(pve, hostname="llm2"), node=node_of(pve), gpus=GPUS, guest=guest
    )
    assert f"    (restart: restart owed since {record['since']}: hostname)" in caplog.text
    before = len(writes(pve))
    assert execute(host, commands) == [True] and host.errors == []
    assert writes(pve)[before:] == ["POST /nodes/pve1/lxc/129/status/reboot"]  # no config write: only the restart
    assert debt_file(pve) is None
    assert plan(spec_of(pve, hostname="llm2"), node_of(pve), GPUS, guest).idle


def test_pending_left_by_anyone_is_seen_and_applied_by_a_restart(pve, guest):
    converge(pve, node_of(pve), spec_of(pve), guest)
    node_of(pve).api.request("PUT", "nodes/pve1/lxc/129/config", nameserver="10.0.0.1")  # an operator, meanwhile
    assert "[pve:pending]" in pve.conf_text(129)
    wanted = plan(spec_of(pve), node_of(pve), GPUS, guest)
    assert not wanted.idle and wanted.needs_restart and wanted.diff.restart_keys == ["nameserver"]
    assert wanted.diff.lines() == ["nameserver: (unset) -> 10.0.0.1 (pending: applies at the next start)"]
    assert converge(pve, node_of(pve), spec_of(pve), guest).errors == []
    assert "[pve:pending]" not in pve.conf_text(129) and "nameserver: 10.0.0.1" in pve.conf_text(129)
    assert plan(spec_of(pve), node_of(pve), GPUS, guest).idle and debt_file(pve) is None
    assert requestlog.schema_violations(pve.requests()) == []


def test_a_restart_owed_is_recorded_before_the_first_write_and_dry_writes_none(pve, guest):
    converge(pve, node_of(pve), spec_of(pve), guest)
    spec = spec_of(pve, features={"nesting": False}, snapshots_keep=1)
    operation(container, NodeHost(), diff=True, spec=spec, node=node_of(pve), gpus=GPUS, guest=guest)  # --dry
    assert debt_file(pve) is None and writes(pve)[-1] == "POST /nodes/pve1/lxc/129/status/start"
    pve.faults([{"method": "POST", "path": "/nodes/*/lxc/*/snapshot", "http_status": 500, "message": "got timeout"}])
    assert converge(pve, node_of(pve), spec, guest).errors  # the first write failed ...
    assert debt_file(pve)["keys"] == ["features"]  # ... after the record
    pve.faults([])
    assert converge(pve, node_of(pve), spec, guest).errors == []
    assert debt_file(pve) is None and "features: nesting=0" in pve.conf_text(129)
    assert plan(spec, node_of(pve), GPUS, guest).idle


def test_a_no_change_run_reads_each_container_once_and_its_node_once(pve, guest):
    """One list per node and one GET .../pending per container (its config's values and digest and
    what is pending), the raw lines from the node's /etc/pve in one command for all its containers;
    uname -n, the restarts owed and the raw lines read once per node host (its NodeFacts), whatever the count."""
    converge(pve, node_of(pve), spec_of(pve), guest)
    node, host = node_of(pve), NodeHost()
    reads = len(pve.requests())
    facts = []
    real = host.get_fact
    host.get_fact = lambda fact, **kwargs: facts.append(fact.__name__) or real(fact, **kwargs)
    for _ in range(3):  # three container operations of one node in one run (the same container here)
        assert operation(container, host, spec=spec_of(pve), node=node, gpus=GPUS, guest=guest) == []
    calls = [f"{e['method']} {e['path']}" for e in pve.requests()[reads:] if not e["path"].endswith("/access/ticket")]
    assert calls == ["GET /nodes/pve1/lxc", "GET /nodes/pve1/lxc/129/pending"]
    assert facts == ["NodeFacts"]


@pytest.mark.parametrize(("stderr", "shown"), [("sh: 1: ss: not found\n", "sh: 1: ss: not found"), ("", "nothing")])
def test_a_container_whose_sshd_never_listens_fails_naming_what_pct_exec_said(monkeypatch, tmp_path, stderr, shown):
    """No host key within HOST_KEY_WAIT_S: the error says what `pct exec` printed, or that it printed nothing."""
    from sglang_pve.provision import container as container_module

    class Silent(NodeHost):
        def run_shell_command(self, command):
            return False, SimpleNamespace(stdout="", stderr=stderr)

    monkeypatch.setattr(container_module, "HOST_KEY_WAIT_S", 0)
    monkeypatch.setattr(container_module.time, "sleep", lambda s: None)
    guest = Guest("10.0.3.129", str(tmp_path / "known_hosts"))
    work = container_module._Work(SimpleNamespace(spec=SimpleNamespace(vmid=129)), guest)
    container_module._pin_host_keys(Silent(), [work])
    assert re.match(rf"container 129: no sshd listening .* \(pct exec: {shown}\)", work.error)
    assert not (tmp_path / "known_hosts").exists()  # nothing pinned
