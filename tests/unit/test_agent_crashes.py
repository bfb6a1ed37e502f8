"""A crash after ready is started again by policy (crashes.py): backoff, a cap per window shared
with the watchdog, per release, then failed with the reason; a failed start is never restarted
by it (poststop tells them apart from what systemd gives ExecStopPost=), and the unit config
that asks for it is validated (config/lifecycle.py)."""

import json
from pathlib import Path

import pydantic
import pytest

from sglang_pve.agent import crashes, exitcodes, lease, restarts, state, status, stopping
from sglang_pve.agent.release_store import Store
from sglang_pve.config.lifecycle import Lifecycle
from tests.unit.agent_support import (
    agent,
    fake_systemctl,
    messages,
    recorded_sleeps,
    sleeper,
    stop,
    systemctl_calls,
    systemd_run_calls,
    write_spec,
)

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated: fake systemctl and systemd-run, tmp releases dir

CRASH = "the main process ended by itself (killed, status KILL) without a requested stop"
START = ["start", "--no-block", "sglang-t1.service"]
# What systemd gives ExecStopPost= (systemd.exec(5), "Environment Variables in Spawned Processes").
AFTER_READY = {"SERVICE_RESULT": "success", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"}
GATE_FAILED = {"SERVICE_RESULT": "exit-code", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"}


def current(tmp_path, release_id: str, active: str = "t1") -> None:
    """A release store naming `release_id` (running `active`) as current."""
    store = Store(str(tmp_path / "releases"))
    store.save({"id": release_id, "active_server": active, "units": [], "files": {}})
    store.set_current(release_id)


def delays(tmp_path) -> list[str]:
    """The --on-active= of every scheduled start ("now" for one without a timer)."""
    found = []
    for call in systemd_run_calls(tmp_path):
        found.append(next((a.split("=", 1)[1] for a in call if a.startswith("--on-active=")), "now"))
    return found


def diagnoses(spec) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(spec.diagnoses_dir).glob("*.json"))]


def test_a_crash_after_ready_is_restarted_with_backoff_and_its_diagnosis_kept_until_the_cap(tmp_path):
    spec = write_spec(tmp_path, watchdog={"backoff_s": 30, "backoff_max_s": 600})  # max_restarts 2
    current(tmp_path, "r1")
    say = messages()
    for number, wait in ((1, 30), (2, 60)):
        assert crashes.after_crash(spec, CRASH, say) == exitcodes.CRASH  # this stop ends failed
        assert state.read_status(spec)["verdict"] == (
            f"restarting in {wait}s: crashed after ready: {CRASH}; restart {number}/2 within 3600s"
        )
    assert delays(tmp_path) == ["30.000s", "60.000s"]  # backoff_s * 2**(k-1)
    (call, _) = systemd_run_calls(tmp_path)
    assert "--unit=sglang-t1.crash-restart" in call and "--collect" in call and "--no-block" in call
    assert call[-3:] == ["crash-restart", "--spec", spec.path]  # the agent again, outside the unit
    assert f"--property=StandardOutput=append:{spec.log}" in call  # its words in the server log, as the unit's
    assert ["stop", "sglang-t1.crash-restart.timer"] in systemctl_calls(tmp_path)  # a leftover goes first
    assert START not in systemctl_calls(tmp_path)  # no start job of a unit in its own stop
    assert len(restarts.in_window(spec)) == 2
    kept = diagnoses(spec)
    assert [(d["kind"], d["phase"]) for d in kept] == [("crash", "ready")] * 2 and CRASH in kept[0]["summary"]
    assert state.read_status(spec)["diagnosis"] in {str(p) for p in Path(spec.diagnoses_dir).glob("*.json")}

    assert crashes.after_crash(spec, CRASH, say) == exitcodes.CRASH
    assert len(systemd_run_calls(tmp_path)) == 2  # the cap: no third start
    assert state.read_status(spec)["verdict"] == (
        f"failed: crashed after ready: {CRASH}; not restarted: restart cap reached (2 restarts within 3600s)"
    )
    assert len(diagnoses(spec)) == 3  # the last crash's diagnosis is kept too
    assert state.read_status(spec)["crash"]["restart_at"] is None


def test_the_backoff_is_capped_and_a_zero_backoff_starts_at_once(tmp_path):
    spec = write_spec(tmp_path, watchdog={"backoff_s": 30, "backoff_max_s": 40, "max_restarts": 3})
    for _ in range(3):
        crashes.after_crash(spec, CRASH, messages())
    assert delays(tmp_path) == ["30.000s", "40.000s", "40.000s"]
    other = write_spec(tmp_path, server="t2", watchdog={"backoff_s": 0, "backoff_max_s": 0})
    crashes.after_crash(other, CRASH, messages())
    assert delays(tmp_path)[-1] == "now"


def test_the_crash_count_is_shared_with_the_watchdog_and_starts_again_with_a_new_release(tmp_path):
    spec = write_spec(tmp_path, watchdog={"backoff_s": 30, "backoff_max_s": 600})
    current(tmp_path, "r1")
    restarts.record(spec)  # a watchdog restart of a wedge
    crashes.after_crash(spec, CRASH, messages())
    assert state.read_status(spec)["verdict"].endswith("restart 2/2 within 3600s")
    crashes.after_crash(spec, CRASH, messages())
    assert "not restarted: restart cap reached (2 restarts" in state.read_status(spec)["verdict"]
    current(tmp_path, "r2")  # the fix deployed: its first crash meets neither r1's cap nor its backoff
    crashes.after_crash(spec, CRASH, messages())
    assert state.read_status(spec)["verdict"].startswith("restarting in 30s: ")
    assert delays(tmp_path) == ["60.000s", "30.000s"] and len(restarts.in_window(spec)) == 1


@pytest.mark.parametrize("why", ["policy off", "deploy lock", "pending", "other configuration", "gpus"])
def test_no_restart_when_the_policy_is_off_or_the_unit_is_not_what_should_run(tmp_path, why):
    spec = write_spec(tmp_path, watchdog={"restart_on_crash": why != "policy off"})
    current(tmp_path, "r1", active="other" if why == "other configuration" else "t1")
    if why == "pending":
        Store(str(tmp_path / "releases")).set_pending("r2")
    holder = sleeper() if why == "deploy lock" else None
    if holder:
        lease_file = tmp_path / "releases" / lease.LEASE
        lease_file.write_text(json.dumps({"token": "tok", "holder": {"pid": holder.pid}}))
    blocked = "the GPUs were not released (poststop exit 4)" if why == "gpus" else None
    try:
        assert crashes.after_crash(spec, CRASH, messages(), blocked) == exitcodes.CRASH
    finally:
        if holder:
            stop(holder)
    assert systemd_run_calls(tmp_path) == [] and restarts.in_window(spec) == []
    reason = {
        "policy off": "restart_on_crash is off",
        "deploy lock": "a deploy holds the container's lock (it decides what runs)",
        "pending": "a switch is pending",
        "other configuration": "release r1 runs other",
        "gpus": blocked,
    }[why]
    assert state.read_status(spec)["verdict"] == f"failed: crashed after ready: {CRASH}; not restarted: {reason}"
    assert [d["kind"] for d in diagnoses(spec)] == ["crash"]


def test_a_tp_group_member_is_never_restarted_alone(tmp_path):
    group = {"name": "g", "rank": 1, "nnodes": 2, "dist_init_port": 29500, "addresses": ["10.0.0.1", "10.0.0.2"]}
    group["rank0_port"] = 30000
    spec = write_spec(tmp_path, group=group)
    assert crashes.after_crash(spec, CRASH, messages()) == exitcodes.CRASH
    assert systemd_run_calls(tmp_path) == [] and restarts.in_window(spec) == []
    assert state.read_status(spec)["verdict"].endswith(
        "not restarted: a member of TP group g is never restarted alone (it cannot rejoin its group)"
    )
    assert crashes.policy(spec) == "off (TP group member)"


def poststop(spec, environ: dict) -> tuple[int, str]:
    child = agent("poststop", "--spec", spec.path, env_extra=environ)
    out, _ = child.communicate(timeout=60)
    return child.returncode, out


def test_poststop_restarts_a_crash_after_ready_and_never_a_failed_start_or_a_requested_stop(tmp_path):
    spec = write_spec(tmp_path)
    gate_said = "failed: stalled in weights (no log progress for 10s)"
    state.update_status(spec, verdict=gate_said)
    stopping.mark(spec)  # a requested stop (ExecStop saw the main PID alive); SGLang ends it by SIGKILL
    assert poststop(spec, AFTER_READY)[0] == exitcodes.OK
    # The gate failed (or the main process died before ready): systemd's result is not success.
    assert poststop(spec, GATE_FAILED)[0] == exitcodes.OK
    assert systemd_run_calls(tmp_path) == [] and restarts.in_window(spec) == [] and diagnoses(spec) == []
    assert state.read_status(spec)["verdict"] == gate_said  # the gate's own verdict and diagnosis stand

    code, out = poststop(spec, AFTER_READY)
    assert code == exitcodes.CRASH and delays(tmp_path) == ["0.100s"], out
    assert state.read_status(spec)["verdict"].startswith(f"restarting in 0.1s: crashed after ready: {CRASH}")


def test_poststop_fails_the_unit_the_watchdog_killed_at_its_cap_without_restarting_it(tmp_path):
    spec = write_spec(tmp_path)
    state.update_status(spec, verdict="failed: watchdog restart cap reached (2 restarts within 3600s); wedged")
    stopping.mark(spec, "failing")  # the watchdog's mark before its SIGKILL
    code, out = poststop(spec, AFTER_READY)
    assert code == exitcodes.CRASH and systemd_run_calls(tmp_path) == [], out
    assert state.read_status(spec)["verdict"].startswith("failed: watchdog restart cap reached")
    assert not stopping.take(spec, "failing")  # taken


def test_the_timer_starts_the_unit_again_unless_something_changed_meanwhile(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, watchdog={"backoff_s": 30, "backoff_max_s": 600})
    current(tmp_path, "r1")
    crashes.after_crash(spec, CRASH, messages())
    unit = {"sglang-t1.service": {"ActiveState": "failed"}}
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, unit)))
    assert crashes.restart(spec, messages()) == exitcodes.OK
    assert systemctl_calls(tmp_path).count(START) == 1 and state.read_status(spec)["crash"]["restart_at"] is None

    crashes.after_crash(spec, CRASH, messages())
    current(tmp_path, "r2", active="other")  # a deploy switched to another configuration meanwhile
    assert crashes.restart(spec, messages()) == exitcodes.OK
    assert systemctl_calls(tmp_path).count(START) == 1
    assert (
        state.read_status(spec)["verdict"]
        == f"failed: crashed after ready: {CRASH}; not restarted: release r2 runs other"
    )

    current(tmp_path, "r1")
    fake_systemctl(tmp_path, {"sglang-t1.service": {"ActiveState": "activating"}})  # started by someone else
    say = messages()
    assert crashes.restart(spec, say) == exitcodes.OK
    assert systemctl_calls(tmp_path).count(START) == 1 and "it is activating" in " ".join(say.said)


def test_the_timer_waits_for_the_crash_s_own_stop_to_end(tmp_path, monkeypatch):
    """A 1 s backoff can end while poststop still writes the diagnosis: the unit is deactivating."""
    spec = write_spec(tmp_path)
    monkeypatch.setenv(
        "SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, {"sglang-t1.service": {"ActiveState": "deactivating"}}))
    )
    # The stop ends once the timer was seen waiting for it (its first poll), not at a fixed time: under
    # load that time can come before the timer looked, and the wait is never tested.
    failed = {"sglang-t1.service": {"ActiveState": "failed"}}
    slept = recorded_sleeps(crashes, monkeypatch, lambda _: fake_systemctl(tmp_path, failed))
    assert crashes.restart(spec, messages(), poll_s=0.05) == exitcodes.OK
    assert slept == [0.05]  # it waited one poll for the deactivating unit, then started it
    assert systemctl_calls(tmp_path).count(START) == 1


def test_status_shows_the_count_the_cap_the_policy_and_a_pending_restart(tmp_path):
    spec = write_spec(tmp_path, watchdog={"backoff_s": 30, "backoff_max_s": 600})
    crashes.after_crash(spec, CRASH, messages())
    failed = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"}
    entry = status.server(spec, failed, {"ActiveState": "active", "SubState": "waiting"})
    assert entry["restarts"]["in_window"] == 1 and entry["restarts"]["max"] == 2
    assert entry["restarts"]["on_crash"] == "restart (cap 2 within 3600s)" and entry["restarts"]["crash_restart_at"]
    assert entry["verdict"].startswith("restarting in ") and entry["verdict"].endswith(f"crashed after ready: {CRASH}")
    gone = status.server(spec, failed, {"ActiveState": "inactive"})  # the timer was stopped: none comes
    assert gone["restarts"]["crash_restart_at"] is None
    assert gone["verdict"] == f"failed: crashed after ready: {CRASH}"
    off = write_spec(tmp_path, server="t2", watchdog={"restart_on_crash": False})
    assert status.server(off, failed)["restarts"]["on_crash"] == "off"


def test_the_config_model_validates_the_policy_per_server():
    assert Lifecycle().watchdog.restart_on_crash is True  # default on
    assert Lifecycle.model_validate({"watchdog": {"restart_on_crash": False, "max_restarts": 0}})
    with pytest.raises(pydantic.ValidationError, match="restart_on_crash is true but watchdog.max_restarts is 0"):
        Lifecycle.model_validate({"watchdog": {"max_restarts": 0}})
    with pytest.raises(pydantic.ValidationError, match="valid boolean"):
        Lifecycle.model_validate({"watchdog": {"restart_on_crash": "yes"}})
    with pytest.raises(pydantic.ValidationError, match="backoff_max_s .5. is below watchdog.backoff_s .10."):
        Lifecycle.model_validate({"watchdog": {"backoff_s": 10, "backoff_max_s": 5}})
