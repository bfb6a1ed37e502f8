"""Which path a task that stops and starts a server takes on a fleet's member (deploy/fleet.py): a
replica rolls through its router, a TP rank switches with its whole group or is refused, the bench
refuses a rank, a snapshot rollback refuses both; each refusal names the member, its set or group
and what to run instead."""

from types import SimpleNamespace

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config.replica_set import ReplicaSet
from sglang_pve.deploy import fleet, group_switch
from sglang_pve.deploy.operations import releases

SET = {"members": ["sglang1", "sglang2", "sglang3"], "router": {"host": "router1"}}
GROUPS = {"tp": {"server": "baseline", "members": ["sglang4", "sglang5"]}}


class _Host:
    def __init__(self, name: str, data: dict):
        self.name, self.data = f"@pveguest/{name}", SimpleNamespace(get=data.get, dict=lambda: data)
        self.executing_op_hash = "op"


@pytest.fixture
def fleet_hosts(monkeypatch):
    """The scale lab's shape: replicas sglang1..3 behind router1, TP group tp = sglang4 + sglang5;
    `run(names)` sets which hosts this run has (--limit), `failed` those that failed already."""
    replica_set = ReplicaSet.model_validate(SET)
    hosts = {
        name: _Host(
            name,
            {
                "replica_sets": {"llama": SET},
                "container": {"node": "pve2" if name[-1] in "25" else "pve1"},
                **({"tp_groups": GROUPS} if name[-1] in "45" else {}),
            },
        )
        for name in ("sglang1", "sglang2", "sglang3", "sglang4", "sglang5", "router1", "alone")
    }
    hosts["alone"] = _Host("alone", {})
    monkeypatch.setattr(
        fleet.replicas,
        "member_of",
        lambda host: ("llama", replica_set) if host.name[-7:] in SET["members"] else None,
    )
    limit = {"hosts": list(hosts.values())}
    failed: set = set()
    monkeypatch.setattr(
        fleet,
        "state",
        SimpleNamespace(
            inventory=list(hosts.values()), is_host_in_limit=lambda h: h in limit["hosts"], failed_hosts=failed
        ),
    )

    def run(*names):
        limit["hosts"] = [hosts[n] for n in names]

    return SimpleNamespace(hosts=hosts, run=run, failed=failed)


def test_each_member_has_its_place(fleet_hosts):
    hosts = fleet_hosts.hosts
    assert fleet.place(hosts["sglang2"]) == fleet.Replica("llama", ReplicaSet.model_validate(SET), "sglang2")
    rank = fleet.place(hosts["sglang5"])
    assert rank == fleet.Rank("tp", ("sglang4", "sglang5"), "sglang5") and rank.rank == 1
    assert fleet.place(hosts["alone"]) is None and fleet.place(hosts["router1"]) is None


def test_a_switch_of_a_rank_needs_every_rank_of_its_group_in_the_run(fleet_hosts):
    hosts = fleet_hosts.hosts
    assert fleet.group_problem(hosts["sglang4"], "tasks/switch.py") is None  # the whole inventory
    fleet_hosts.run("sglang4", "sglang5")
    assert fleet.group_problem(hosts["sglang4"], "tasks/switch.py") is None
    fleet_hosts.run("sglang4", "sglang2")
    problem = fleet.group_problem(hosts["sglang4"], "tasks/switch.py")
    assert problem.render(hosts["sglang4"].name) == (
        "@pveguest/sglang4: tp_groups.tp.members = ['sglang4', 'sglang5']: sglang4 is rank 0 of TP group tp "
        "(sglang4 rank 0, sglang5 rank 1): its ranks stop and start together (sglang_pve/deploy/group_switch.py) "
        "and sglang5 is not in this run; tasks/switch.py on one rank alone breaks the group (the other ranks "
        "wait on it). Fix: include every rank of tp: --limit sglang4 --limit sglang5 (or no --limit)"
    )
    assert fleet.group_problem(hosts["sglang2"], "tasks/switch.py") is None  # a replica rolls alone
    fleet_hosts.run("sglang4", "sglang5")
    fleet_hosts.failed.add(hosts["sglang5"])  # in the run, but failed before its switch
    assert "sglang5 is not in this run" in fleet.group_problem(hosts["sglang4"], "a switch").message


def test_the_bench_refuses_a_rank_and_says_what_to_run_instead(fleet_hosts):
    hosts = fleet_hosts.hosts
    problem = fleet.bench_problem(hosts["sglang5"])
    assert problem.render(hosts["sglang5"].name) == (
        "@pveguest/sglang5: tp_groups.tp = ['sglang4', 'sglang5']: sglang5 is rank 1 of TP group tp (sglang4 rank 0, "
        "sglang5 rank 1): tasks/bench.py starts one container's server per configuration and a rank cannot start "
        "alone (the other ranks wait on it); the bench measures one container or one replica. Fix: bench without "
        "the group's ranks (--limit the other hosts); compare the group's configurations by switching every rank "
        "together: tasks/switch.py --data server=NAME --limit sglang4 --limit sglang5"
    )
    assert fleet.bench_problem(hosts["sglang2"]) is None  # benched out of its router (tools/bench/runner.py)
    assert fleet.bench_problem(hosts["alone"]) is None
    with pytest.raises(PyinfraError, match=r"invalid configuration for @pveguest/sglang5 \(1 problem"):
        raise fleet.refused(hosts["sglang5"], problem)


def test_a_snapshot_rollback_refuses_a_replica_and_a_rank(fleet_hosts):
    hosts = fleet_hosts.hosts
    assert fleet.snapshot_problem(hosts["sglang2"]).render("sglang2") == (
        "sglang2: replica_sets.llama.members = ['sglang1', 'sglang2', 'sglang3']: sglang2 serves in replica set "
        "llama behind its router on router1: a snapshot rollback stops and starts its container while the router "
        "still sends it requests. Fix: roll back its release instead: tasks/rollback.py --limit sglang2 (out of "
        "the router, drained, switched, gated, back in); or take sglang2 out of replica_sets.llama first"
    )
    rank = fleet.snapshot_problem(hosts["sglang4"])
    assert "sglang4 is rank 0 of TP group tp" in rank.message
    assert rank.fix == (
        "roll back the group's release on every rank together: tasks/rollback.py --limit sglang4 --limit sglang5; "
        "or take sglang4 out of tp_groups.tp first"
    )
    assert fleet.snapshot_problem(hosts["alone"]) is None


def test_the_deploys_switch_of_a_rank_left_alone_is_a_failed_step_not_a_lone_start(fleet_hosts, monkeypatch):
    """deploy.py --limit sglang4: the release operation's group switch (releases._group_switched)
    refuses instead of stopping rank 0 under rank 1 (group_switch waits only for the ranks in the
    operation); nothing is stopped, no agent command runs."""
    hosts = fleet_hosts.hosts
    monkeypatch.setattr(group_switch, "state", fleet.state)
    fleet_hosts.run("sglang4")
    rank = group_switch.member(hosts["sglang4"])
    report = SimpleNamespace(current_record=None, previous=None)
    steps = list(releases._group_switched(rank, "agent switch", report, ["sglang-baseline.service"], "tok"))
    assert len(steps) == 1 and isinstance(steps[0], FunctionCommand)  # no systemctl stop, no switch
    logged = []
    hosts["sglang4"].log_styled = lambda message, **kwargs: logged.append(message)
    assert steps[0].execute(None, hosts["sglang4"], {}) is False
    assert "sglang5 is not in this run; a switch on one rank alone breaks the group" in logged[0]


def test_a_container_restart_provisioning_owes_goes_the_fleets_way_or_is_refused(fleet_hosts):
    """provision/container.py and fleet_restart.py: a replica's or rank's restart is its own deploy's
    (out of the router; group-wide); refused before any write when the run cannot do it that way."""
    hosts, why = fleet_hosts.hosts, ["dev0 only apply at start"]
    assert fleet.restart_path(hosts["alone"]) is None and fleet.restart_problem(hosts["alone"], 9, why, False) is None
    assert fleet.restart_problem(hosts["sglang2"], 202, why, True) is None
    assert fleet.restart_path(hosts["sglang2"]) == (
        "sglang2 serves in replica set llama: out of its router on router1 and drained first, back once its server "
        "is ready, 1 of the set at a time (in its deploy)"
    )
    assert fleet.restart_path(hosts["sglang5"]).startswith("sglang5 is rank 1 of TP group tp (sglang4 rank 0")
    assert fleet.restart_problem(hosts["sglang2"], 202, why, False).render("pve2") == (
        "pve2: replica_sets.llama.members = ['sglang1', 'sglang2', 'sglang3']: container 202 (sglang2) must restart "
        "(dev0 only apply at start); sglang2 serves in replica set llama behind its router on router1: restarted by "
        "its node alone it breaks what its router sends it, and this task runs no member's deploy, which restarts "
        "it the fleet's way. Fix: run deploy.py instead (its restart goes out of the router, or group-wide): "
        "--limit pve2 --limit sglang2"
    )
    fleet_hosts.run("sglang1", "sglang4")  # deploy.py --limit pve1 --limit sglang1 --limit sglang4
    left_out = fleet.restart_problem(hosts["sglang2"], 202, why, True)
    assert left_out.message.endswith("its own deploy restarts it the fleet's way, and sglang2 is not in this run")
    assert left_out.fix == "include it: --limit pve2 --limit sglang2 (or no --limit)"
    alone = fleet.restart_problem(hosts["sglang4"], 204, why, True)
    assert alone.key == "tp_groups.tp.members" and alone.value == ["sglang4", "sglang5"]
    assert alone.message.startswith(
        "container 204 (sglang4) must restart (dev0 only apply at start); sglang4 is rank 0"
    )
    assert "sglang5 is not in this run; a container restart on one rank alone breaks the group" in alone.message
    assert alone.fix == "include every rank of tp: --limit sglang4 --limit sglang5 (or no --limit)"
    fleet_hosts.run("sglang4", "sglang5")
    assert fleet.restart_problem(hosts["sglang4"], 204, why, True) is None
    refused = fleet.restart_problem(hosts["sglang4"], 204, why, False)
    assert "rank" in refused.message and refused.fix.endswith(
        ": --limit pve1 --limit pve2 --limit sglang4 --limit sglang5"
    )
