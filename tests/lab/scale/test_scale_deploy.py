"""inventory/lab_scale.py: one deploy provisions every guest on both nodes, each with its own GPU
set; the second run changes nothing, and costs each node and each container a fixed number of
remote commands, one API login and one container list per node and one API read per container (issue 17, deliver 4;
bench/fleet.py measures the same for 1, 4 and 16 containers, with wall times)."""

import re
from collections import Counter

import pytest

from lab import layout
from lab.pve import requestlog
from tests.lab.conftest import grand_total, pyinfra
from tests.lab.scale.conftest import on_guest

pytestmark = [pytest.mark.lab]

# What a no-change run costs now, for any number of containers (bench/fleet.py: the same for 1, 4
# and 16). On a node 3: its one read of the run (provision/node_facts.py: GPUs, uname -n, the node
# files' digests, the restarts owed, the containers' raw lines), the node files' own check and one
# for both its units (units.running). In a replica or TP member 5 (the budget: 7): the
# preflight's read (the probe and the host's basics with the deploy lock's count, facts/preflight.py
# PreflightRead), the agent's files, the venv, the NCCL profile's places (its files and the shell rc's
# block, files.file_set block=), the server units with the release (releases.release units=); no
# deploy lock taken or given back (it comes with the first change, deploy/operations/lock.py).
NODE_COMMANDS = 3  # 11 before the node's reads were batched
CONTAINER_COMMANDS = 5  # 13 before the host's basics, the probe and the lock were batched, 7 before the lazy lock
ROUTER_HOST_COMMANDS = 8  # router1: a container's 5 plus the router's venv, unit (files and state: one read), workers
TP_RANKS, TP_UNIT = ("sglang4", "sglang5"), "sglang-baseline.service"  # inventory/lab_scale.py's TP group tp


def on(host: str, *command: str) -> str:
    return on_guest(*command, host=host).stdout


def test_every_guest_runs_on_its_node_with_its_gpus(scale_lab):
    assert grand_total(scale_lab.first_output)["error"] == 0
    for name, (node, vmid, _) in layout.SCALE_GUESTS.items():
        assert f"{vmid} " in on(node, "pct", "list") and "running" in on(node, "pct", "status", str(vmid)), name
    gpus = "ls /dev | grep -E '^nvidia[0-9]+$'"
    assert on("sglang3", "sh", "-c", gpus).split() == ["nvidia2", "nvidia3"]
    assert on("sglang5", "sh", "-c", gpus).split() == [f"nvidia{i}" for i in range(4, 8)]
    assert on("router1", "sh", "-c", gpus + " || true").split() == []  # only a router


def main_pid(guest: str) -> str:
    return on(guest, "systemctl", "show", "-p", "MainPID", "--value", TP_UNIT).strip()


def test_the_second_run_changes_nothing_at_a_fixed_cost_per_host(scale_lab):
    """Also: the TP group, ready on both ranks, is adopted as it runs: no rank restarted (its
    server's main PID the same; deploy/group_switch.py, every rank votes)."""
    logs = {node.name: node.request_log for node in layout.NODES.values()}
    before = {name: len(requestlog.read(path)) for name, path in logs.items()}
    pids = {guest: main_pid(guest) for guest in TP_RANKS}
    _, output = pyinfra("--debug", inventory=scale_lab.inventory)
    assert grand_total(output)["changed"] == 0
    assert {guest: main_pid(guest) for guest in TP_RANKS} == pids and all(p != "0" for p in pids.values())
    for guest in TP_RANKS:
        assert re.search(rf"\[{guest}\].*every rank of TP group tp runs its release and is ready: adopted", output)
    commands = Counter(re.findall(r"Running command on (\S+?):", output))
    nodes = {host: count for host, count in commands.items() if host.startswith("pve")}
    guests = {host: count for host, count in commands.items() if not host.startswith("pve")}
    assert sorted(nodes) == ["pve1", "pve2"] and len(guests) == len(layout.SCALE_GUESTS)
    assert max(nodes.values()) <= NODE_COMMANDS, nodes
    assert guests.pop("router1") <= ROUTER_HOST_COMMANDS, guests
    assert max(guests.values()) <= CONTAINER_COMMANDS, guests
    for name, path in logs.items():
        calls = requestlog.read(path)[before[name] :]
        on_node = sum(1 for node, *_ in layout.SCALE_GUESTS.values() if node == name)
        assert [c["path"] for c in calls].count("/access/ticket") == 1, name
        reads = [c["path"] for c in calls if c["method"] == "GET"]
        assert reads.count(f"/nodes/{name}/lxc") == 1, (name, reads)  # one list per node, shared by its guests
        assert len(reads) - 1 == on_node, (name, reads)  # and one read per container (GET .../pending)
        assert requestlog.schema_violations(calls) == []
