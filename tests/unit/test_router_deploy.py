"""The router's files (deploy/render.py router_files) and a replica set's rolling order
(deploy/rollout.py): the key never on a command line, the launch_router flags, the sandbox; a
replica whose switch failed stops the members of later batches."""

from types import SimpleNamespace

import gevent
import pytest
from pyinfra.api import FunctionCommand, OperationError

from sglang_pve.config import load_deployment
from sglang_pve.config.replica_set import ReplicaSet
from sglang_pve.deploy import group_switch, paths, rollout, sandbox
from sglang_pve.deploy.render import router_args, router_files
from tests.conftest import PROJECT, group_data


@pytest.fixture(autouse=True)
def fresh_run_books(monkeypatch):
    """A run's books of who started, ended and stopped start empty in each test: they are keyed by
    id(state), and a test's SimpleNamespace state can get the id of an earlier test's, freed (the
    fresh-clone CI saw sglang2's failure from the test before)."""
    monkeypatch.setattr(rollout, "_started", {})
    monkeypatch.setattr(rollout, "_ended", {})
    monkeypatch.setattr(group_switch, "_books", {})


KEY = "s3cr3t-router-key"
SET = {
    "members": ["sglang1", "sglang2", "sglang3"],
    "router": {"host": "router1", "policy": "power_of_two", "options": {"health-check-interval-secs": 5}},
}


def deployment(**data):
    return load_deployment("router1", dict(group_data("all"), **data), PROJECT)


def _files(tmp_path, **data):
    key = tmp_path / "api-key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    config = deployment(sglang_secrets={"api-key": {"file": str(key)}}, server_clients=["10.200.0.1"], **data)
    workers = ["http://10.200.0.11:30000", "http://10.200.0.12:30000"]
    return {f.path: f for f in router_files(config, "kimi", ReplicaSet.model_validate(SET), "/opt/r", workers)}


def test_the_unit_runs_the_launcher_with_launch_routers_flags(tmp_path):
    files = _files(tmp_path)
    unit = files[paths.router_unit_path("kimi")].content
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == (
        f"ExecStart=/opt/r/bin/python -I {paths.ROUTER_LAUNCHER} --host 0.0.0.0 --port 30000 --policy power_of_two "
        "--prometheus-host 0.0.0.0 --prometheus-port 29000 "
        "--worker-urls http://10.200.0.11:30000 http://10.200.0.12:30000 --health-check-interval-secs 5"
    )
    for prop in (*sandbox.identity(paths.ROUTER_USER, []), *sandbox.PROPERTIES):
        assert f"{prop[0]}={prop[1]}" in unit.splitlines()
    # IPAddressDeny=any with its workers and its clients (server_clients) allowed
    assert "IPAddressAllow=localhost 10.200.0.11 10.200.0.12 10.200.0.1" in unit.splitlines()


def test_the_key_goes_through_a_credential_never_the_unit_or_argv(tmp_path):
    files = _files(tmp_path)
    key_file = files[paths.router_key_path("kimi")]
    assert (key_file.content, key_file.mode, key_file.secret) == (KEY + "\n", "600", True)
    unit = files[paths.router_unit_path("kimi")].content
    assert KEY not in unit and f"LoadCredential=api-key:{paths.router_key_path('kimi')}" in unit
    launcher = files[paths.ROUTER_LAUNCHER].content
    assert "CREDENTIALS_DIRECTORY" in launcher and '"--api-key"' in launcher


def test_without_a_key_no_credential_and_no_key_file(tmp_path):
    config = deployment()
    files = router_files(config, "kimi", ReplicaSet.model_validate(SET), "/opt/r", [])
    assert [f.path for f in files] == [paths.router_unit_path("kimi"), paths.ROUTER_LAUNCHER]
    assert "LoadCredential" not in files[0].content


def test_no_workers_no_worker_urls_flag():
    assert "--worker-urls" not in router_args(ReplicaSet.model_validate(SET), [])


class _Host:
    def __init__(self, name: str, data: dict):
        self.name, self.data = name, SimpleNamespace(get=data.get, dict=lambda: data)
        self.executing_op_hash = "op"  # pyinfra's, while the host runs an operation


def _rollout_members(monkeypatch, count: int) -> list[_Host]:
    """`count` members of replica set kimi (SET) behind the router at 10.200.0.14, rollout's waits fast."""
    replica_set = ReplicaSet.model_validate(SET)
    monkeypatch.setattr(rollout, "state", SimpleNamespace())
    monkeypatch.setattr(rollout, "POLL_S", 0.01)
    monkeypatch.setattr(rollout.replicas, "member_of", lambda host: ("kimi", replica_set))
    monkeypatch.setattr(rollout.replicas, "router_url", lambda rs: "http://10.200.0.14:30000")
    monkeypatch.setattr(rollout.replicas, "address", lambda host: host.name[-7:])
    return [_Host(f"@pveguest/sglang{i}", {"replica_sets": {"kimi": SET}}) for i in range(1, count + 1)]


def test_members_go_max_unavailable_at_a_time_and_a_failed_one_stops_the_rest(monkeypatch):
    hosts = _rollout_members(monkeypatch, 3)
    words = [getattr(word, "obj", word) for word in rollout.begin(hosts[0])]
    assert words == ["--router", "http://10.200.0.14:30000", "--address", "sglang1", "--drain-s", "60"]
    second = gevent.spawn(rollout.begin, hosts[1])
    gevent.sleep(0.1)
    assert not second.ready()  # sglang1 is out of the router: sglang2 waits
    rollout.end(hosts[0])
    assert second.get(timeout=60)  # sglang1 came back: sglang2 goes
    hosts[1].executing_op_hash = None  # its command failed: its operation is over without end()
    with pytest.raises(OperationError, match=r"rolling switch of replica set kimi stopped at @pveguest/sglang2"):
        rollout.begin(hosts[2])


def test_a_failed_member_handed_over_as_pyinfras_host_proxy_stops_the_rest(monkeypatch):
    """releases.py hands rollout pyinfra's context proxy (`from pyinfra import host`): kept as is, a
    waiting member read it as itself, never saw the failed one and waited forever (the scale lab's
    failed-gate rollout, tests/lab/scale/test_rollout_lab.py, hung until its 600 s timeout)."""
    from pyinfra import host as context_host
    from pyinfra.context import ctx_host

    hosts = _rollout_members(monkeypatch, 2)

    def switch_as(member):
        with ctx_host.use(member):
            return next(rollout.switching(context_host, lambda routed: routed))

    assert gevent.spawn(switch_as, hosts[0]).get(timeout=60)[0] == "--router"
    hosts[0].executing_op_hash = None  # its command failed: its operation is over without end()
    refusal = gevent.spawn(switch_as, hosts[1]).get(timeout=60)
    assert isinstance(refusal, FunctionCommand)  # a failed step on this host, no traceback
    logged = []
    hosts[1].log_styled = lambda message, **kwargs: logged.append(message)
    assert refusal.execute(None, hosts[1], {}) is False
    assert logged == [
        "not switched: the rolling switch of replica set kimi stopped at @pveguest/sglang1 "
        "(its switch failed and was reverted; see its output above)"
    ]


def test_hosts_of_no_set_never_wait():
    assert rollout.begin(_Host("@pveguest/sglang4", {})) == []


GROUPS = {"tp": {"server": "baseline", "members": ["sglang4", "sglang5"]}}


def _ranks(monkeypatch, executing: bool = True) -> tuple[_Host, _Host]:
    """The TP group tp's two ranks in operation "op" of a run (pyinfra's state as group_switch reads it)."""
    rank0, rank1 = (_Host(f"@pveguest/sglang{i}", {"tp_groups": GROUPS}) for i in (4, 5))
    running = SimpleNamespace(operation_meta=SimpleNamespace(is_complete=lambda: False))
    run = SimpleNamespace(
        inventory=[rank0, rank1],
        ops={rank0: {"op": running}, rank1: {"op": running}},
        active_hosts={rank0, rank1},
        is_executing=executing,
        print_output=True,
    )
    monkeypatch.setattr(group_switch, "state", run)
    monkeypatch.setattr(group_switch, "POLL_S", 0.01)
    return rank0, rank1


def test_a_tp_rank_stops_then_waits_for_its_groups_other_ranks_to_stop(monkeypatch):
    rank0, rank1 = _ranks(monkeypatch)
    first = group_switch.stopped_together(rank0, ["sglang-baseline.service"])
    assert str(next(first)) == "systemctl stop -- sglang-baseline.service"
    waiting = gevent.spawn(list, first)
    gevent.sleep(0.1)
    assert not waiting.ready()  # rank 1 still runs its old server: rank 0 must not start yet
    assert [str(c) for c in group_switch.stopped_together(rank1, ["sglang-baseline.service"])] == [
        "systemctl stop -- sglang-baseline.service"
    ]
    assert waiting.get(timeout=60) == []  # both stopped: both go on


def test_a_tp_rank_does_not_wait_for_a_rank_with_nothing_to_switch(monkeypatch):
    rank0, rank1 = _ranks(monkeypatch)
    rank1.executing_op_hash = None  # its release runs already: its operation is over
    group_switch.state.ops[rank1]["op"].operation_meta.is_complete = lambda: True
    assert [str(c) for c in group_switch.stopped_together(rank0, [])] == []  # nothing ran: no stop either
    assert list(group_switch.stopped_together(_Host("@pveguest/sglang1", {}), ["x.service"])) == []


class _Agent:
    """The agent's switch or revert on a rank: logged when it runs, `ok` its outcome."""

    def __init__(self, words: str, ok: bool, log: list):
        self.words, self.ok, self.log = words, ok, log

    def __str__(self) -> str:
        return self.words

    def execute(self, state, host, connector_arguments):
        self.log.append((host.name[-7:], self.words))
        gevent.sleep(0)  # the other rank's greenlet runs meanwhile, as over SSH
        return self.ok, None


def _execute(host, commands, log: list) -> bool:
    """What pyinfra does with an operation's commands on `host`: run each, stop at a failed one."""
    for command in commands:
        if isinstance(command, FunctionCommand):
            logged: list[str] = []
            host.log_styled = lambda message, said=logged, **kwargs: said.append(message)
            log.append((host.name[-7:], logged))
            return command.execute(None, host, {}) is not False
        if isinstance(command, _Agent):
            if not command.execute(None, host, {})[0]:
                return False
        elif isinstance(command, group_switch._Recorded):
            command.execute(group_switch.state, host, {})
        else:
            log.append((host.name[-7:], str(command)))
            gevent.sleep(0)
    return True


def _switch_group(monkeypatch, ok: dict[str, bool], revert_ok: bool = True):
    ranks, log = _ranks(monkeypatch), []

    def switched(host):
        rank = group_switch.member(host)
        revert = lambda why: _Agent(f"revert ({why})", revert_ok, log)  # noqa: E731
        commands = rank.switched(_Agent("switch", ok[host.name[-7:]], log), ["sglang-baseline.service"], revert)
        return _execute(host, commands, log)

    results = [gevent.spawn(switched, host) for host in ranks]
    return [r.get(timeout=30) for r in results], log  # 30 s: only a hang of the barriers reaches it


def test_a_switch_that_fails_on_rank_1_reverts_every_rank_together_and_fails_on_both(monkeypatch):
    """Rank 0's own start passed: it goes back too, and no rank starts its old release before
    every rank stopped again (both ranks' revert after both second stops)."""
    results, log = _switch_group(monkeypatch, {"sglang4": True, "sglang5": False})
    assert results == [False, False]
    stop = "systemctl stop -- sglang-baseline.service"
    why = "TP group tp: the switch failed on sglang5"
    for rank in ("sglang4", "sglang5"):
        assert [words for host, words in log if host == rank] == [
            stop,
            "switch",
            stop,
            f"revert ({why})",
            [
                f"{why}: every rank stopped before any started again; every rank runs the release that ran before it "
                "again (see the output above)"
            ],
        ]
    steps = [(host, words) for host, words in log if not isinstance(words, list)]
    second_stops = [i for i, (_, words) in enumerate(steps) if words == stop][2:]
    reverts = [i for i, (_, words) in enumerate(steps) if words.startswith("revert")]
    switches = [i for i, (_, words) in enumerate(steps) if words == "switch"]
    assert max(switches) < min(second_stops) and max(second_stops) < min(reverts)


def test_a_group_whose_every_rank_switched_ends_there(monkeypatch):
    results, log = _switch_group(monkeypatch, {"sglang4": True, "sglang5": True})
    assert results == [True, True]
    assert sorted(words for _, words in log) == ["switch", "switch"] + ["systemctl stop -- sglang-baseline.service"] * 2


def test_a_rank_whose_revert_fails_fails_with_the_agents_words(monkeypatch):
    results, log = _switch_group(monkeypatch, {"sglang4": False, "sglang5": False}, revert_ok=False)
    assert results == [False, False]
    assert [words for _, words in log][-2:] == [
        "revert (TP group tp: the switch failed on sglang4, sglang5)",
    ] * 2  # the revert's own failure ends the operation: no group line after it


def test_the_group_adopts_only_when_every_rank_would(monkeypatch):
    for votes, adopted in (((True, True), True), ((True, False), False), ((False, False), False)):
        monkeypatch.setattr(group_switch, "_books", {})
        ranks = _ranks(monkeypatch)
        greenlets = [gevent.spawn(group_switch.member(h).adopts, v) for h, v in zip(ranks, votes, strict=True)]
        assert [g.get(timeout=30) for g in greenlets] == [adopted, adopted], votes  # 30 s: a hang only


def test_a_rank_waits_for_no_vote_of_a_rank_out_of_the_operation(monkeypatch):
    """--limit left rank 1 out (it has no such operation), or its operation ended without a vote
    (it raised: taking_part marks the end): rank 0 decides alone instead of waiting forever."""
    rank0, rank1 = _ranks(monkeypatch)
    rank1.executing_op_hash = None
    del group_switch.state.ops[rank1]["op"]
    assert gevent.spawn(group_switch.member(rank0).adopts, True).get(timeout=30) is True
    group_switch.state.ops[rank1]["op"] = group_switch.state.ops[rank0]["op"]  # in it, not complete: it raised
    rank1.executing_op_hash = "op"
    group_switch.member(rank1).post("ended")  # taking_part's finally, while pyinfra still runs its operation
    rank1.executing_op_hash = None
    assert gevent.spawn(group_switch.member(rank0).adopts, False).get(timeout=30) is False


def test_planning_waits_for_no_rank(monkeypatch):
    rank0, _ = _ranks(monkeypatch, executing=False)
    assert group_switch.member(rank0).adopts(True) is True and group_switch.member(rank0).adopts(False) is False


def test_the_groups_revert_goes_back_to_the_release_current_before_the_run(monkeypatch):
    """releases._group_switched hands the group its revert: the agent's revert to the release the
    Releases fact called current, where a rollback went before (--previous), with the group's reason;
    without a release before, none (every rank stays stopped)."""
    from sglang_pve.deploy import fleet
    from sglang_pve.deploy.operations import releases

    rank0, _ = _ranks(monkeypatch)
    monkeypatch.setattr(fleet, "group_problem", lambda host, what: None)
    handed = []
    monkeypatch.setattr(
        group_switch.Rank, "switched", lambda self, command, units, revert: handed.append((units, revert)) or iter(())
    )
    current = {"id": "20261202T003207Z-cc8b36c0", "active_server": "baseline", "units": ["sglang-baseline.service"]}
    report = SimpleNamespace(current_record=current, previous="20261201T120000Z-0e9771ca")
    rank = group_switch.member(rank0)
    list(releases._group_switched(rank, "agent switch", report, ["sglang-eagle3.service"], "tok"))
    units, revert = handed[-1]
    assert units == ["sglang-baseline.service", "sglang-eagle3.service"]  # the new release's and the current one's
    words = str(revert("TP group tp: the switch failed on sglang5"))
    assert words.startswith(
        "python3 /opt/sglang-pve/sglang-pve-agent.pyz revert --to 20261202T003207Z-cc8b36c0 "
        "--previous 20261201T120000Z-0e9771ca --why 'TP group tp: the switch failed on sglang5' "
    )
    assert words.endswith("--lease tok --detach")
    list(releases._group_switched(rank, "agent switch", SimpleNamespace(current_record=None, previous=None), [], "t"))
    assert handed[-1][1] is None


def test_an_operation_nested_beside_the_release_keeps_its_own_books(monkeypatch):
    """A new container's deploy runs nested in one operation (deploy_when_provisioned), so its
    operations share the host's executing_op_hash: rank 0's provisioning restart (fleet_restart.py,
    scope "restart") ended before the release's switch, and the switch read that as rank 0's
    failure (the scale lab's first deploy: "the switch failed on sglang4" while sglang4's passed)."""
    ranks = _ranks(monkeypatch)
    for host in ranks:
        group_switch.member(host, "restart").post("ended")
    results, _ = _switch_group(monkeypatch, {"sglang4": True, "sglang5": True})
    assert results == [True, True]


def test_the_routers_sync_leaves_out_a_replica_out_of_it_on_purpose(monkeypatch):
    """Deploying the router's host while a replica is benched (or restarted, fleet_restart.py): the
    sync adds back only the missing members without RouterLeft's mark, read on them; a listed one
    is not asked (a no-change run reads no member)."""
    from pyinfra.context import ctx_host, ctx_state

    from sglang_pve.deploy.facts.router import RouterLeft, RouterStatus
    from sglang_pve.deploy.operations import router as router_ops

    asked: list[str] = []

    class _Member:
        def __init__(self, name, mark):
            self.name, self.mark = name, mark

        def get_fact(self, fact):
            assert fact is RouterLeft
            asked.append(self.name)
            return self.mark

    bench = {"router": "http://10.0.0.30:30000", "since": "2026-12-04T22:40:00Z", "marker": "Managed by sglang-pve"}
    members = {"s1": _Member("s1", None), "s2": _Member("s2", bench), "s3": _Member("s3", None)}
    urls = {name: f"http://{name}:8000" for name in members}
    listed = [urls["s1"]]
    router_host = SimpleNamespace(
        name="router1",
        print_prefix="[router1] ",
        get_fact=lambda fact, **kwargs: {"workers": [{"url": u} for u in listed], "error": None},
        noop=lambda text: asked.append(f"noop: {text}"),
    )
    run = SimpleNamespace(
        failed_hosts=set(), inventory=SimpleNamespace(get_host=lambda n, default=None: members.get(n, default))
    )
    monkeypatch.setattr(router_ops, "state", run)

    def workers() -> list[str]:
        with ctx_host.use(router_host), ctx_state.use(run):
            return [str(c) for c in router_ops.router_workers._inner(router="http://127.0.0.1:30000", members=urls)]

    assert RouterStatus  # the router host's fact, above
    (sync,) = workers()
    assert sync.endswith("router-sync --router http://127.0.0.1:30000 --worker http://s1:8000 --worker http://s3:8000")
    assert sorted(asked) == ["s2", "s3"]  # the missing ones only
    listed[:], asked[:] = [urls["s1"], urls["s3"]], []
    assert workers() == [] and asked == ["s2", "noop: router http://127.0.0.1:30000 routes to 2 ready replica(s)"]
    members["s2"].mark = None  # it joined again (router-join removes the mark), or its join failed
    assert workers()[0].endswith("--worker http://s1:8000 --worker http://s2:8000 --worker http://s3:8000")
