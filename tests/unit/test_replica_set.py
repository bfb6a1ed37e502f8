"""Replica sets in data (config/replica_set.py): the keys, the router's options, and the checks
across the inventory (every member exists and serves, the same model and SGLang version)."""

import pytest
from pydantic import ValidationError

from sglang_pve.config.deployment import HostData
from sglang_pve.config.replica_set import (
    OPTIONS,
    ROUTER_VERSION,
    Member,
    ReplicaSet,
    read_router_pin,
    replica_set_problems,
    sets_of,
)

KIMI = "/shared/models/Kimi-K2.5-INT4"
VERSION = "0.5.16.dev20260720+g8905cbd42"


def _set(**overrides) -> ReplicaSet:
    data = {"members": ["sglang1", "sglang2", "sglang3"], "router": {"host": "router1"}, **overrides}
    return ReplicaSet.model_validate(data)


def _hosts(**members: Member) -> dict[str, Member]:
    serving = Member(container=True, sglang_version=VERSION, model=KIMI)
    hosts = {name: serving for name in ("sglang1", "sglang2", "sglang3")}
    hosts["router1"] = Member(container=True, sglang_version=VERSION, model=None)
    return {**hosts, **members}


def test_the_pin_is_one_line_of_its_own_file():
    assert ROUTER_VERSION == "0.3.2"
    assert HostData.model_fields["router_version"].default == ROUTER_VERSION
    with pytest.raises(ValueError, match="expected one line"):
        read_router_pin("sglang-router>=0.3\n")


def test_defaults_are_launch_routers():
    replica_set = _set()
    assert (replica_set.router.port, replica_set.router.policy, replica_set.router.prometheus_port) == (
        30000,
        "cache_aware",
        29000,
    )
    assert (replica_set.max_unavailable, replica_set.drain_timeout_s) == (1, 60)
    assert replica_set.router.flags() == []


def test_options_become_flags_in_a_stable_order():
    options = {"retry-max-retries": 3, "disable-circuit-breaker": True}
    router = _set(router={"host": "router1", "options": options}).router
    assert router.flags() == ["--disable-circuit-breaker", "--retry-max-retries", "3"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"worker-urls": "http://x:1"}, "not a router option the toolkit passes"),
        ({"api-key": "k"}, "not a router option"),
        ({"control-plane-api-keys": "a:b:admin:k"}, "not a router option"),
        ({"retry-max-retries": "3"}, "is not a int"),
        ({"retry-max-retries": True}, "is not a int"),
        ({"disable-retries": False}, "set with true, or left out"),
        ({"log-level": "loud"}, "use one of debug"),
        ({"health-check-endpoint": "health; rm -rf /"}, "a path such as /health"),
        ({"queue-size": -1}, "must not be negative"),
    ],
)
def test_refused_options_say_why(options, message):
    with pytest.raises(ValidationError, match=message):
        _set(router={"host": "router1", "options": options})


def test_float_options_take_ints_and_every_option_has_a_type():
    assert _set(router={"host": "router1", "options": {"cache-threshold": 1}}).router.flags() == [
        "--cache-threshold",
        "1",
    ]
    assert set(OPTIONS.values()) <= {bool, int, float, str}


def test_policy_and_members_are_checked():
    with pytest.raises(ValidationError, match="not a policy of sglang-router 0.3.2"):
        _set(router={"host": "router1", "policy": "bucket"})
    with pytest.raises(ValidationError, match="sglang2 named more than once"):
        _set(members=["sglang1", "sglang2", "sglang2"])
    with pytest.raises(ValidationError):
        _set(members=[])
    with pytest.raises(ValidationError):
        _set(router={"host": "router1", "bind": "example.com"})


def test_a_valid_set_has_no_problem():
    assert replica_set_problems("kimi", _set(), _hosts()) == []


def test_every_problem_at_once_naming_host_key_and_fix():
    hosts = _hosts(
        sglang2=Member(container=True, sglang_version="0.5.15", model="/data/other"),
        sglang3=Member(container=False, sglang_version=VERSION, model=KIMI),
    )
    del hosts["router1"]
    problems = replica_set_problems("kimi", _set(members=["sglang1", "sglang2", "sglang3", "sglang9"]), hosts)
    rendered = [p.render("replica_sets") for p in problems]
    assert [(p.key, p.value) for p in problems] == [
        ("replica_sets.kimi.members", "sglang3"),
        ("replica_sets.kimi.members", "sglang9"),
        ("replica_sets.kimi.router.host", "router1"),
        ("replica_sets.kimi.members", "sglang1, sglang2"),
        ("replica_sets.kimi.members", "sglang1, sglang2"),
    ]
    assert "not a container" in rendered[0] and "no host of the inventory" in rendered[1]
    assert f"sglang1: {KIMI}, sglang2: /data/other" in rendered[3]
    assert f"sglang1: {VERSION}, sglang2: 0.5.15" in rendered[4] and "Fix: give every member" in rendered[4]


def test_a_member_without_a_server_and_a_router_among_members_are_refused():
    hosts = _hosts(sglang3=Member(container=True, sglang_version=VERSION, model=None))
    problems = replica_set_problems("kimi", _set(router={"host": "sglang1"}), hosts)
    messages = [p.message for p in problems]
    assert any("runs no server" in m for m in messages)
    assert any("also a member" in m for m in messages)


def test_max_unavailable_leaves_one_serving():
    problems = replica_set_problems("kimi", _set(max_unavailable=3), _hosts())
    assert [p.fix for p in problems] == ["use at most 2"]


def test_sets_of_a_host():
    sets = {"kimi": _set(), "small": _set(members=["sglang4"], router={"host": "sglang1"})}
    assert sets_of(sets, "sglang1") == (["kimi"], ["small"])
    assert sets_of(sets, "router1") == ([], ["kimi"])
    assert sets_of(sets, "pve1") == ([], [])
