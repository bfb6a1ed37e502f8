"""The deploy lock of a converging task, taken at its first change (deploy/operations/lock.py,
deploys/locked.py), on pyinfra's @fake connector: a run that changes nothing runs no lock command;
one that changes takes it, with the count it read first expected, before its first command; a
refusal stops the run before that command; a count read odd (held) takes it before any read, as
an imperative task does. The lab runs it for real (tests/lab/test_deploy.py)."""

import json
from types import SimpleNamespace

import pytest
from pyinfra import host
from pyinfra.api import Config, Inventory, OperationError, State, operation
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops

from sglang_pve.deploys import locked as locked_module
from sglang_pve.deploys.locked import locked
from tests.conftest import PROJECT

LOCK, UNLOCK = "sglang-pve-agent.pyz lock --json", "sglang-pve-agent.pyz unlock"


@operation()
def unchanged():
    host.noop("in place already")
    return
    yield


@operation()
def write(path: str):
    yield f"touch {path}"


def run(monkeypatch, body, count: int | None, lock_answer: dict | None = None) -> tuple[list[str], bool]:
    """The commands a locked task with `body` runs on a fake host whose lock's count was read
    as `count`, and whether the host came through."""
    monkeypatch.setattr(locked_module, "basics", lambda: SimpleNamespace(lock_count=count))
    monkeypatch.setattr(locked_module, "deployment", lambda: SimpleNamespace(data=SimpleNamespace(wait_lock=0)))
    monkeypatch.setattr(locked_module, "run_token", lambda: "0123456789abcdef")
    monkeypatch.setattr(locked_module, "who", lambda: "alice@laptop")
    monkeypatch.setattr(locked_module, "is_node", lambda: False)
    answer = lock_answer or {"held": True, "message": "deploy lock held for alice@laptop (deploy)", "holder": None}
    responses = {LOCK: json.dumps(answer), UNLOCK: "deploy lock released"}
    inventory = Inventory((["@fake/t"], {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}))
    state = State(inventory=inventory, config=Config(), check_for_changes=False)  # -y: no prepare pass
    state.cwd = str(PROJECT)
    connect_all(state)
    add_deploy(state, locked("deploy")(body))
    fake = inventory.get_host("@fake/t")
    try:
        run_ops(state)
    except OperationError as error:  # as pyinfra's CLI gets it: the run stops, naming the host and why
        assert str(error).startswith("@fake/t: ")
        return list(fake.connector.executed_commands), False
    return list(fake.connector.executed_commands), fake not in state.failed_hosts


def test_a_run_that_changes_nothing_runs_no_lock_command(monkeypatch):
    def body():
        unchanged(name="first")
        unchanged(name="second")

    commands, ok = run(monkeypatch, body, count=4)
    assert ok and commands == []


def test_the_first_change_takes_the_lock_at_the_count_read_first_and_gives_it_back_last(monkeypatch):
    def body():
        unchanged(name="in place")
        write(name="changes", path="/tmp/a")
        write(name="changes too", path="/tmp/b")

    commands, ok = run(monkeypatch, body, count=4)
    assert ok and len(commands) == 4, commands
    assert LOCK in commands[0] and "--expect 4" in commands[0] and "--wait 0" in commands[0]
    assert commands[1:3] == ["touch /tmp/a", "touch /tmp/b"]  # taken once, before the first command
    assert UNLOCK in commands[3]


def test_a_lock_refused_at_the_first_change_stops_the_run_before_that_command(monkeypatch):
    def body():
        write(name="changes", path="/tmp/a")

    refused = {"held": False, "message": "its count 4, now 6 ... Fix: run it again", "holder": None}
    commands, ok = run(monkeypatch, body, count=4, lock_answer=refused)
    assert not ok and len(commands) == 1 and LOCK in commands[0]  # no touch, nothing to give back


@pytest.mark.parametrize("count", [5, None], ids=["held when read (odd)", "no count read"])
def test_a_count_not_read_free_takes_the_lock_before_any_read_as_before(monkeypatch, count):
    def body():
        unchanged(name="in place")

    commands, ok = run(monkeypatch, body, count=count)
    assert ok and len(commands) == 2, commands
    assert LOCK in commands[0] and "--expect" not in commands[0] and UNLOCK in commands[1]
