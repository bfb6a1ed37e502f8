"""The restart provisioning owes a fleet member, in its own deploy (provision/fleet_restart.py
restart_owed): a replica leaves its router, its container restarts, it comes back once its server
started at boot, in its set's turn (rollout.py); a TP rank stops with its whole group first, and its
server, which its boot starts alone, is stopped again for the group switch. The scale lab shows both
for real (tests/lab/scale/test_fleet_restart_lab.py)."""

from types import SimpleNamespace

import gevent
import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host, ctx_state

from sglang_pve.config.replica_set import ReplicaSet
from sglang_pve.deploy import fleet, group_switch, rollout
from sglang_pve.deploy.facts.lock import DeployLock
from sglang_pve.provision import fleet_restart

SET = {"members": ["sglang1", "sglang3"], "router": {"host": "router1"}}
GROUPS = {"tp": {"server": "baseline", "members": ["sglang4", "sglang5"]}}


class _Host:
    def __init__(self, name: str, data: dict, log: list):
        self.name, self.print_prefix, self.log_list = f"@pveguest/{name}", f"[{name}] ", log
        self.data = SimpleNamespace(get=data.get, dict=lambda: data)
        self.executing_op_hash = "op"

    def run_shell_command(self, command, print_output=False):
        self.log_list.append((self.name[-7:], str(command)))
        gevent.sleep(0)
        return True, SimpleNamespace(output_lines=[])

    def log(self, text, log_func=None):
        self.log_list.append((self.name[-7:], text))

    def log_styled(self, text, **kwargs):
        self.log_list.append((self.name[-7:], text))

    def noop(self, text):
        self.log_list.append((self.name[-7:], f"noop: {text}"))

    def get_fact(self, fact, **kwargs):
        if fact is DeployLock:  # taken again after the restart (its holder did not survive it)
            self.log_list.append((self.name[-7:], f"lock {kwargs['token']}"))
            return SimpleNamespace(held=True, message="held")
        record = {"active_server": "baseline", "units": ["sglang-baseline.service"]}
        return SimpleNamespace(running=["sglang-baseline.service"], current_record=record)


class _Node:
    name = "pve1"  # the node host (hashable, as pyinfra's Host: state.failed_hosts holds hosts)


NODE = _Node()


def _owes(name: str) -> fleet_restart.Owed:
    spec = SimpleNamespace(vmid=int(name[-1]) + 200)
    plan = SimpleNamespace(spec=spec, restart_reasons=["dev0 only apply at start"])
    return fleet_restart.Owed(plan, SimpleNamespace(), SimpleNamespace(), NODE)


@pytest.fixture
def run(monkeypatch):
    """A run's state as the operation reads it (executing), its books fresh; `owing`: who owes a restart."""
    log: list = []
    owing: set[str] = set()
    monkeypatch.setattr(rollout, "_started", {})
    monkeypatch.setattr(rollout, "_ended", {})
    monkeypatch.setattr(group_switch, "_books", {})
    monkeypatch.setattr(group_switch, "POLL_S", 0.01)
    monkeypatch.setattr(fleet_restart, "owed", lambda host: _owes(host.name) if host.name[-7:] in owing else None)
    monkeypatch.setattr(
        fleet_restart.container,
        "restart",
        lambda at, node, plan, guest: log.append(("node", f"reboot {plan.spec.vmid}")),
    )
    monkeypatch.setattr(
        fleet_restart, "deployment", lambda: SimpleNamespace(servers={}, data=SimpleNamespace(wait_lock=9))
    )
    monkeypatch.setattr(fleet_restart, "run_token", lambda: "tok")
    monkeypatch.setattr(fleet_restart, "who", lambda: "me@here")
    replica_set = ReplicaSet.model_validate(SET)
    monkeypatch.setattr(
        rollout.replicas, "member_of", lambda h: ("llama", replica_set) if h.name[-7:] in SET["members"] else None
    )
    monkeypatch.setattr(rollout.replicas, "router_url", lambda rs: "http://10.0.0.30:30000")
    monkeypatch.setattr(rollout.replicas, "address", lambda h: h.name[-7:])
    hosts = {
        n: _Host(
            n, {"replica_sets": {"llama": SET}, **({"tp_groups": GROUPS} if n in ("sglang4", "sglang5") else {})}, log
        )
        for n in ("sglang1", "sglang3", "sglang4", "sglang5")
    }
    running = SimpleNamespace(operation_meta=SimpleNamespace(is_complete=lambda: False))
    state = SimpleNamespace(
        inventory=list(hosts.values()),
        ops={h: {"op": running} for h in hosts.values()},
        active_hosts=set(hosts.values()),
        is_executing=True,
        failed_hosts=set(),
        is_host_in_limit=lambda h: True,
        config=SimpleNamespace(DIFF=False),
    )
    for module in (group_switch, fleet, fleet_restart):
        monkeypatch.setattr(module, "state", state)
    return SimpleNamespace(hosts=hosts, log=log, owing=owing, state=state)


def _operation(run, name: str) -> bool:
    """restart_owed on host `name` as pyinfra runs it: each command, a failed one ends it."""
    host = run.hosts[name]
    with ctx_host.use(host), ctx_state.use(run.state):
        for command in fleet_restart.restart_owed._inner():
            if isinstance(command, FunctionCommand):
                if command.function(run.state, host, *command.args, **command.kwargs) is False:
                    return False
            else:
                host.run_shell_command(command)
    return True


def test_a_replica_leaves_its_router_restarts_and_comes_back_once_its_server_started(run):
    run.owing.add("sglang1")
    assert _operation(run, "sglang1") and _operation(run, "sglang3")
    steps = [words for _, words in run.log if not words.startswith("restarting")]
    assert steps[0].endswith(
        "router-leave --dir /var/lib/sglang-pve/releases --router http://10.0.0.30:30000 --address sglang1 --drain-s 60"
    )
    assert steps[1:3] == ["reboot 201", "lock tok"]  # this run's deploy lock again: the restart ended its holder
    del steps[2]
    assert steps[2].endswith(
        "router-join --dir /var/lib/sglang-pve/releases --router http://10.0.0.30:30000 --address sglang1 --wait-s 60"
    )
    assert steps[3] == "noop: no container restart owed"  # sglang3 owes none: never leaves its router


def test_replicas_restart_max_unavailable_at_a_time(run):
    run.owing.update({"sglang1", "sglang3"})
    both = [gevent.spawn(_operation, run, name) for name in ("sglang1", "sglang3")]
    assert [g.get(timeout=30) for g in both] == [True, True]
    steps = [
        (host, words if host == "node" else words.split(" --dir")[0].rsplit(" ", 1)[-1])
        for host, words in run.log
        if "router-" in words or host == "node"
    ]
    first, second = steps[0][0], steps[3][0]
    assert {first, second} == {"sglang1", "sglang3"}
    assert steps == [  # one is back before the other leaves (max_unavailable 1)
        (first, "router-leave"),
        ("node", f"reboot 20{first[-1]}"),
        (first, "router-join"),
        (second, "router-leave"),
        ("node", f"reboot 20{second[-1]}"),
        (second, "router-join"),
    ]


def test_every_rank_stops_before_a_rank_restarts_and_its_boot_start_is_stopped_again(run):
    run.owing.add("sglang4")
    ranks = [gevent.spawn(_operation, run, name) for name in ("sglang4", "sglang5")]
    assert [g.get(timeout=30) for g in ranks] == [True, True]
    stop = "systemctl stop -- sglang-baseline.service"
    steps = [(host, words) for host, words in run.log if not words.startswith("restarting")]
    reboot = steps.index(("node", "reboot 204"))
    assert {("sglang4", stop), ("sglang5", stop)} <= set(steps[:reboot])  # both stopped before it
    assert steps[reboot + 1 :] == [("sglang4", "lock tok"), ("sglang4", stop)]  # its boot started it alone: stopped


def test_a_rank_whose_peer_is_not_in_the_run_stops_nothing(run):
    run.owing.add("sglang5")
    run.state.is_host_in_limit = lambda h: h.name.endswith("sglang5")  # deploy.py --limit sglang5
    assert _operation(run, "sglang5") is False
    assert [words for _, words in run.log] == [
        "@pveguest/sglang5: tp_groups.tp.members = ['sglang4', 'sglang5']: sglang5 is rank 1 of TP group tp (sglang4 "
        "rank 0, sglang5 rank 1): its ranks stop and start together (sglang_pve/deploy/group_switch.py) and sglang4 "
        "is not in this run; a container restart on one rank alone breaks the group (the other ranks wait on it). "
        "Fix: include every rank of tp: --limit sglang4 --limit sglang5 (or no --limit)"
    ]


def test_a_container_alone_owes_nothing_here(run):
    run.hosts["alone"] = _Host("alone", {}, run.log)
    assert _operation(run, "alone") and run.log == [("@pveguest/alone"[-7:], "noop: no container restart owed")]


def test_dry_says_what_would_happen_and_waits_for_no_one(run, caplog):
    import logging

    caplog.set_level(logging.INFO)
    run.owing.update({"sglang1", "sglang4"})
    run.state.is_executing = False  # --dry: the prepare pass only
    assert _operation(run, "sglang1") and _operation(run, "sglang4") and _operation(run, "sglang5")
    assert [words for _, words in run.log] == []  # no router command, no stop, no reboot
    said = [r.getMessage() for r in caplog.records]
    assert (
        "[sglang1] would restart container 201 (dev0 only apply at start): sglang1 serves in replica set llama: out "
        "of its router on router1 and drained first, back once its server is ready, 1 of the set at a time (in its "
        "deploy)"
    ) in said
    for rank in ("sglang4", "sglang5"):
        assert any(
            line.startswith(
                f"[{rank}] would stop sglang-baseline.service (TP group tp: every rank stops before sglang4"
            )
            for line in said
        ), said


def test_a_replica_whose_restart_failed_stops_the_rolling_restart_and_says_so(run, monkeypatch):
    run.owing.update({"sglang1", "sglang3"})
    monkeypatch.setattr(rollout, "router_step", lambda host, verb, routed, *extra: verb != "router-join")
    assert _operation(run, "sglang1") is False  # rebooted, but not back in its router: the operation fails
    run.hosts["sglang1"].executing_op_hash = None  # pyinfra: its operation is over, without end()
    assert _operation(run, "sglang3") is False
    assert run.log[-1] == (
        "sglang3",
        "not restarted: the rolling restart of replica set llama stopped at @pveguest/sglang1 (its restart or its "
        "return to the router failed; see its output above)",
    )
    assert ("node", "reboot 203") not in run.log  # sglang3 was never restarted
