"""TP groups (config/tp_group.py): ranks from the inventory, refused before any change when the
members disagree; the members' units get SGLang's multi-node flags and their specs the group."""

import copy
import json

import pytest
import yaml

from sglang_pve.agent import spec
from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.deploy import render
from tests.conftest import PROJECT, group_data

SERVERS = yaml.safe_load((PROJECT / "group_data" / "servers.yml").read_text())
GROUP = {"kimi": {"server": "tp", "members": ["sglang4", "sglang5"], "dist_init_port": 20000}}


def _member(vmid: int, address: str, gpus: list[int] | str, servers_file: str) -> dict:
    data = group_data("all")
    data.update(
        servers_file=servers_file,
        active_server="tp",
        tp_groups=copy.deepcopy(GROUP),
        container={"gpus": gpus, "net0": {"bridge": "vmbr0", "ip": f"{address}/24"}, "vmid": vmid},
    )
    return data


@pytest.fixture
def hosts(tmp_path):
    servers = copy.deepcopy(SERVERS)
    servers["servers"]["tp"] = {"tp-size": 8}
    (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
    path = str(tmp_path / "servers.yml")
    return {
        "@pveguest/sglang4": _member(132, "10.0.0.4", [0, 1, 2, 3], path),
        "@pveguest/sglang5": _member(133, "10.0.0.5", [4, 5, 6, 7], path),
        "@pveguest/sglang1": {**group_data("all"), "servers_file": path},
    }


def _load(host, hosts):
    return load_deployment(host, hosts[host], PROJECT, hosts=hosts)


def test_ranks_come_from_the_inventory_and_reach_the_flags_and_the_spec(hosts):
    rank0, rank1 = _load("@pveguest/sglang4", hosts), _load("@pveguest/sglang5", hosts)
    assert (rank0.tp.rank, rank1.tp.rank, rank1.tp.nnodes, rank1.tp.tp_size) == (0, 1, 2, 8)
    server = rank1.servers["tp"]
    flags = yaml.safe_load(render.server_yaml(server, tp=render.tp_rank(rank1, server)))
    assert flags["nnodes"] == 2 and flags["node-rank"] == 1 and flags["dist-init-addr"] == "10.0.0.4:20000"
    assert flags["tp-size"] == 8
    lifecycle = render.lifecycle_spec(server, render.tp_rank(rank1, server))
    assert lifecycle.group == spec.Group("kimi", 1, 2, 20000, ["10.0.0.4", "10.0.0.5"], 8000)
    assert lifecycle.group.peers == {0: "10.0.0.4"}
    assert spec.parse(json.loads(spec.to_json(lifecycle))).group == lifecycle.group
    # the group's flags go only to its own configuration; a host in no group gets none
    baseline = rank1.servers["baseline"]
    assert "nnodes" not in yaml.safe_load(render.server_yaml(baseline, tp=render.tp_rank(rank1, baseline)))
    assert _load("@pveguest/sglang1", hosts).tp is None


def _refused(host, hosts) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(host, hosts)
    return str(caught.value)


def test_gpus_must_add_up_to_tp_size_and_be_the_same_on_every_member(hosts):
    hosts["@pveguest/sglang5"]["container"]["gpus"] = [4, 5]
    message = _refused("@pveguest/sglang4", hosts)
    assert "tp_groups.kimi = '4 + 2 GPUs'" in message and "the members need the same number of GPUs" in message
    hosts["@pveguest/sglang4"]["container"]["gpus"] = [0, 1]
    message = _refused("@pveguest/sglang4", hosts)
    assert "tp_groups.kimi = '2 + 2 GPUs'" in message and "set tp-size: 4" in message


def test_preflight_counts_a_members_share_of_tp_size(hosts):
    from sglang_pve.deploy.preflight.host import gpu_problems

    rank1 = _load("@pveguest/sglang5", hosts)
    four = ["nvidia4", "nvidia5", "nvidia6", "nvidia7"]
    assert gpu_problems({"tp": rank1.servers["tp"]}, four, rank1.tp) == []  # 8 over 2 nodes: 4 here
    (problem,) = gpu_problems({"tp": rank1.servers["tp"]}, four[:2], rank1.tp)
    assert "needs 4 GPUs but the host has 2" in problem.message


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda h: h.pop("@pveguest/sglang5"), "tp_groups.kimi.members = 'sglang5': no such host"),
        (lambda h: h["@pveguest/sglang5"].update(sglang_version="0.5.10"), "members.sglang5.sglang_version"),
        (lambda h: h["@pveguest/sglang5"].update(nccl_profile="nccl-defaults"), "members.sglang5.nccl_profile"),
        (lambda h: h["@pveguest/sglang5"].update(active_server="baseline"), "members.sglang5.active_server"),
        (lambda h: h["@pveguest/sglang5"]["container"].update(gpus="all"), "sglang5.container.gpus"),
        (lambda h: h["@pveguest/sglang4"]["container"]["net0"].update(ip="dhcp"), "sglang4.container.net0.ip"),
        (
            lambda h: h["@pveguest/sglang4"]["tp_groups"].update(other={"server": "tp", "members": ["sglang4", "x"]}),
            "a member of kimi already",
        ),
    ],
    ids=["missing member", "version", "nccl profile", "configuration", "gpus all", "dhcp rank 0", "two groups"],
)
def test_members_that_disagree_are_refused(hosts, change, key):
    change(hosts)
    message = _refused("@pveguest/sglang4", hosts)
    assert key in message and "Fix:" in message, message


def test_a_different_model_on_one_rank_is_refused(hosts, tmp_path):
    servers = copy.deepcopy(SERVERS)
    servers["servers"]["tp"] = {"tp-size": 8, "model-path": "/shared/models/other"}
    (tmp_path / "other.yml").write_text(yaml.safe_dump(servers))
    hosts["@pveguest/sglang5"]["servers_file"] = str(tmp_path / "other.yml")
    assert "members.sglang5.model-path = '/shared/models/other'" in _refused("@pveguest/sglang4", hosts)


@pytest.mark.parametrize("flag", ["nnodes", "node-rank", "dist-init-addr"])
def test_multi_node_flags_are_never_written_in_servers_yml(hosts, tmp_path, flag):
    servers = copy.deepcopy(SERVERS)
    servers["servers"]["tp"] = {"tp-size": 8, flag: 2 if flag != "dist-init-addr" else "10.0.0.4:20000"}
    (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
    assert f"servers.tp.{flag}" in _refused("@pveguest/sglang4", hosts)


def test_a_spec_group_with_too_few_addresses_is_refused():
    data = json.loads(spec.to_json(spec.parse(_spec_data())))
    data["group"] = {
        "name": "kimi",
        "rank": 1,
        "nnodes": 2,
        "dist_init_port": 20000,
        "addresses": ["10.0.0.4"],
        "rank0_port": 8000,
    }
    with pytest.raises(spec.SpecError, match="group"):
        spec.parse(data)


def _spec_data() -> dict:
    deployment = load_deployment("sglang1", group_data("all"), PROJECT)
    return json.loads(spec.to_json(render.lifecycle_spec(deployment.servers["baseline"])))


def test_preflight_asks_rank_1_to_reach_rank_0_and_rank_0_for_its_port(hosts):
    from sglang_pve.deploy.preflight import probe_spec

    rank0, rank1 = _load("@pveguest/sglang4", hosts), _load("@pveguest/sglang5", hosts)
    assert probe_spec(rank1, "/v", judge_all=False).reach == (("10.0.0.4", 20000),)
    spec0 = probe_spec(rank0, "/v", judge_all=False)
    assert spec0.reach == () and 20000 in spec0.ports


def test_preflight_refuses_an_unreachable_rank_0_and_a_taken_dist_init_port(hosts):
    from sglang_pve.deploy.facts.preflight import Holder, HostSnapshot, Listener
    from sglang_pve.deploy.preflight.tp_group import member_problems

    rank0, rank1 = _load("@pveguest/sglang4", hosts).tp, _load("@pveguest/sglang5", hosts).tp
    unreachable = HostSnapshot(reach={"10.0.0.4:20000": "timed out"})
    (problem,) = member_problems(rank1, unreachable)
    assert (
        problem.key == "tp_groups.kimi.dist_init_port" and "cannot reach rank 0's dist-init address" in problem.message
    )
    assert member_problems(rank1, HostSnapshot(reach={"10.0.0.4:20000": None})) == []
    rogue = Listener(20000, "0.0.0.0", (Holder(99, "nc", "nc -l 20000", None),))
    (problem,) = member_problems(rank0, HostSnapshot(listeners=[rogue]))
    assert "pid 99 (nc -l 20000) listens there" in problem.message
    ours = Listener(20000, "0.0.0.0", (Holder(98, "python", "sglang", "sglang-tp.service"),))
    assert member_problems(rank0, HostSnapshot(listeners=[ours])) == []  # the group's own rank 0, running


def test_preflight_refuses_ranks_whose_model_config_differs(hosts):
    from sglang_pve.deploy.facts.preflight import HostSnapshot, ModelDir
    from sglang_pve.deploy.preflight.tp_group import disagreement, rank_facts

    rank0, rank1 = _load("@pveguest/sglang4", hosts), _load("@pveguest/sglang5", hosts)
    model = rank0.servers["tp"].args.model_path
    facts0 = rank_facts("sglang4", rank0, HostSnapshot(models={model: ModelDir(True, {"model_type": "a"}, None)}))
    same = rank_facts("sglang5", rank1, HostSnapshot(models={model: ModelDir(True, {"model_type": "a"}, None)}))
    other = rank_facts("sglang5", rank1, HostSnapshot(models={model: ModelDir(True, {"model_type": "b"}, None)}))
    assert disagreement(rank1.tp, same, [facts0]) == []
    (problem,) = disagreement(rank1.tp, other, [facts0])
    assert "model config.json (sha256) differ" in problem.message and "rank 0 (sglang4)" in str(problem.value)


def test_the_probe_counts_a_refused_connection_as_reached(monkeypatch):
    import socket

    from sglang_pve.agent import preflight_probe

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # bound, not listening: refused
    assert preflight_probe.reach("127.0.0.1", closed) is None

    def no_answer(address, timeout):
        raise TimeoutError("timed out")  # a firewall that drops: socket.create_connection's timeout

    monkeypatch.setattr(preflight_probe.socket, "create_connection", no_answer)
    assert preflight_probe.reach("10.0.0.4", 20000) == "timed out"


def test_a_group_configuration_bound_to_the_loopback_is_refused(hosts, tmp_path):
    servers = copy.deepcopy(SERVERS)
    servers["servers"]["tp"] = {"tp-size": 8, "host": "127.0.0.1"}
    (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
    message = _refused("@pveguest/sglang5", hosts)
    assert "tp_groups.kimi.server = 'tp': tp binds 127.0.0.1" in message and "set host: 0.0.0.0" in message


def test_a_members_unit_allows_ip_traffic_with_its_peers_and_no_other_configuration_does(hosts):
    """The unit's IP allow list (sglang_pve/deploy/sandbox.py ip_allow): rank 1 reaches rank 0 and
    back over the members' addresses; its other configurations serve no group, so theirs hold none."""
    from sglang_pve.deploy.facts.unit_host import UnitHost

    rank1 = _load("@pveguest/sglang5", hosts)

    def allow(name: str) -> str:
        unit = render.server_files(rank1, rank1.servers[name], "/opt/v", UnitHost(252, ("10.0.0.5",)))[0].content
        return next(line for line in unit.splitlines() if line.startswith("IPAddressAllow="))

    assert allow("tp") == "IPAddressAllow=localhost 10.0.0.5 10.0.0.4"
    assert allow("baseline") == "IPAddressAllow=localhost 10.0.0.5"
