"""The restart history starts again with a new release (restarts.py), and the watchdog leaves a
wedged server alone once a stop came while it collected the evidence (watchdog.py)."""

import pytest

from sglang_pve.agent import diagnosis, exitcodes, restarts, stopping, watchdog
from sglang_pve.agent import procs as procs_module
from sglang_pve.agent.release_store import Store
from tests.unit.agent_support import messages, sleeper, stop, systemctl_calls, write_spec

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated: fake systemctl, tmp releases dir


def current(tmp_path, release_id: str) -> None:
    store = Store(str(tmp_path / "releases"))
    store.save({"id": release_id, "active_server": "t1", "units": [], "files": {}})
    store.set_current(release_id)


def test_the_restart_history_starts_again_with_a_new_release(tmp_path):
    spec = write_spec(tmp_path)  # max_restarts 2
    current(tmp_path, "r1")
    restarts.record(spec)
    restarts.record(spec)
    assert not restarts.may_restart(spec)  # the cap of release r1
    current(tmp_path, "r2")  # the fix deployed: its first wedge does not meet r1's cap
    assert restarts.in_window(spec) == [] and restarts.may_restart(spec) and restarts.backoff_left(spec) == 0
    current(tmp_path, "r1")  # rolled back: r1's own history again
    assert len(restarts.in_window(spec)) == 2


def test_the_watchdog_does_not_act_when_a_stop_came_while_it_collected_the_evidence(tmp_path, monkeypatch):
    """A switch stopping a wedged server: a restart now would replace its stop job and fail it."""
    spec = write_spec(tmp_path)
    main = sleeper()
    collect = diagnosis.collect

    def slow_collect(*args, **kwargs):
        stopping.mark(spec)  # the switch's stop arrives meanwhile
        return collect(*args, **kwargs)

    monkeypatch.setattr(diagnosis, "collect", slow_collect)
    evidence = {"phase": "ready", "seconds_in_phase": 1.0, "seconds_stalled": 1.0, "main_pid": main.pid}
    say = messages()
    try:
        assert watchdog._wedged(spec, procs_module.identify(main.pid), say, "wedged: x", evidence) == exitcodes.OK
        assert main.poll() is None  # not killed
    finally:
        stop(main)
    assert systemctl_calls(tmp_path) == [] and restarts.in_window(spec) == []
    assert "is being stopped: not acting on it" in " ".join(say.said)
