"""A requested stop ends the unit inactive, a crash still fails it (stopping.py, cli stop/poststop)."""

import pytest

from sglang_pve.agent import exitcodes, stopping, watchdog
from tests.unit.agent_support import HealthServer, agent, messages, sleeper, stop, systemctl_calls, write_spec

pytestmark = pytest.mark.usefixtures("agent_env")  # isolated from the host's devices and systemd

KILLED = {"SERVICE_RESULT": "success", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"}  # SuccessExitStatus=SIGKILL


@pytest.mark.parametrize(
    "requested, environ, crash",
    [
        (True, KILLED, False),  # systemctl stop: SGLang SIGKILLs its own tree at the end of the drain
        (False, KILLED, True),  # the same end with nobody asking: a crash
        (False, {"SERVICE_RESULT": "success", "EXIT_CODE": "exited", "EXIT_STATUS": "0"}, False),
        (
            False,
            {"SERVICE_RESULT": "exit-code", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"},
            False,
        ),  # failing already
        (False, {"SERVICE_RESULT": "success", "EXIT_CODE": "exited", "EXIT_STATUS": "1"}, True),
        (False, {}, False),  # not run by systemd
    ],
)
def test_what_counts_as_a_crash(requested, environ, crash):
    assert bool(stopping.crashed(requested, environ)) is crash


def test_stop_marks_only_while_the_main_process_lives_and_poststop_takes_the_mark(tmp_path):
    spec = write_spec(tmp_path)
    main = sleeper()
    try:
        assert agent("stop", "--spec", spec.path, "--main-pid", str(main.pid)).wait(timeout=30) == exitcodes.OK
    finally:
        stop(main)
    child = agent("poststop", "--spec", spec.path, env_extra=KILLED)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == exitcodes.OK, out
    assert not stopping.take(spec)  # poststop took it
    # After a crash systemd runs ExecStop with $MAINPID unset (the unit's --main-pid=${MAINPID} is
    # then "--main-pid="): no mark, and poststop fails the unit.
    assert agent("stop", "--spec", spec.path, "--main-pid=").wait(timeout=30) == exitcodes.OK
    child = agent("poststop", "--spec", spec.path, env_extra=KILLED)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == exitcodes.CRASH and "without a requested stop" in out


def test_the_unit_passes_an_unset_main_pid_as_an_empty_value_not_as_no_argument():
    """systemd.service(5), "Command lines": a lone $MAINPID word becomes zero words when unset (after
    a crash), leaving --main-pid without its value (exit 2, the unit's result exit-code, and the
    crash would never be seen as one); ${MAINPID} inside a word becomes an empty string."""
    from sglang_pve.deploy import render

    text = (render.TEMPLATES / "sglang-server.service.j2").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("ExecStop=")]
    assert line.endswith(" --main-pid=${MAINPID}"), line


def test_the_watchdog_leaves_a_draining_server_alone(tmp_path):
    """KillMode=mixed: the detached watchdog gets no SIGTERM; a draining server answers 503, and
    a restart queued now would start the unit again after the requested stop."""
    spec = write_spec(tmp_path)
    main = sleeper()
    try:
        stopping.mark(spec)
        with HealthServer(spec.port, {"/health_generate": [503]}):
            code = watchdog.run(spec, main.pid, messages(), tick_s=0.01)
    finally:
        stop(main)
    assert code == exitcodes.OK and systemctl_calls(tmp_path) == []


def test_a_new_start_clears_the_mark_of_an_earlier_stop(tmp_path):
    """Else a crash of this start would be excused as that old requested stop."""
    from sglang_pve.agent import reaper

    spec = write_spec(tmp_path)
    stopping.mark(spec)
    assert reaper.prestart(spec, messages()) == exitcodes.OK
    assert not stopping.requested(spec)
