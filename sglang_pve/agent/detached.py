"""A switch apart from the SSH session that asked for it: a transient systemd unit.

A 1T model's gate wait takes 30-90 minutes, and the controller that asked for the switch can
drop at any time (a closed laptop, a killed run). `agent apply|switch|transient --detach ...`
runs the same command as a transient service, `systemd-run --pipe --collect`: while the
controller follows, the service's output is the command's output and systemd-run exits with its
exit code; when the SSH session ends, the service goes on (the unit is PID 1's: seen on the
lab guest's systemd 252, a SIGKILLed systemd-run --pipe client leaves its unit running to the
end), its words in `journalctl -u sglang-pve-switch-<ms>.service`. Without systemd-run it runs in the session.

The command in the unit writes its outcome beside the releases, under the switch lock:

    {"unit": "sglang-pve-switch-1764600000000.service", "command": "apply", "lease": "3f9c0a1b",
     "started": "2026-12-01T14:50:03Z", "state": "running", "code": null, "current": null}
    ... then state "ended", "ended", its exit code and the current release's id.

The deploy lock keeps that unit's work its run's (lease.py): it takes the switch lock before it
checks its run's lease, and a run whose controller went away lets go of the deploy lock only once
the switch lock is free; the next run waits for both, so it finds the outcome (the release ready,
or reverted) instead of starting another switch. The run that gives its lock back marks the
outcome seen; one not seen yet was left by a controller that went away, and a rerun says so.
"""

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from sglang_pve.agent import overrides, state
from sglang_pve.agent.output import Say
from sglang_pve.agent.state import Record

UNIT_PREFIX = "sglang-pve-switch-"
OUTCOME = ".switch.json"  # hidden: release ids are the other *.json names (release_store.py)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def command(agent_argv: list[str], unit: str, tool: str, agent: str, python: str = sys.executable) -> list[str]:
    """The systemd-run command line that runs `agent_argv` (without --detach) in unit `unit`."""
    return [
        tool,
        "--unit",
        unit,
        "--description",
        "sglang-pve switch (agent " + " ".join(agent_argv[:1]) + ")",
        "--collect",  # gone once it ended, failed or not: the outcome file keeps what it did
        "--pipe",  # the output and the exit code are the command's (it waits, like --wait)
        "--quiet",
        "--service-type=exec",
        "--",
        python,
        agent,
        *agent_argv,
        "--in-unit",
        unit,
    ]


def run(agent_argv: list[str], say: Say, inline: Callable[[], int], agent: str | None = None) -> int:
    """Run the command in its own unit and wait for it, following its output; `inline` runs it
    here instead when this host has no systemd-run."""
    tool = overrides.systemd_run()
    if tool is None:
        say("systemd-run not found: the switch runs in this SSH session (a dropped controller ends it)")
        return inline()
    unit = f"{UNIT_PREFIX}{time.time_ns() // 1_000_000}.service"
    argv = [a for a in agent_argv if a != "--detach"]
    sys.stdout.flush()
    done = subprocess.run(command(argv, unit, tool, agent or os.path.abspath(sys.argv[0])), check=False)
    return done.returncode


def read(directory: str) -> Record | None:
    return state.read_json(os.path.join(directory, OUTCOME))


def _write(directory: str, outcome: Record) -> None:
    state.write_json(os.path.join(directory, OUTCOME), outcome, mode=0o600)


@contextlib.contextmanager
def recorded(
    directory: str, unit: str | None, command_name: str, lease: str | None, current: Callable[[], str | None]
) -> Iterator[Callable[[int], int]]:
    """Inside the switch lock, in unit `unit` (None: not detached, nothing written): the outcome
    says running, then ended with the exit code the body passes to the callable it gets (or, when
    the body raised, code null and the error) and the current release then."""
    if unit is None:
        yield lambda code: code
        return
    outcome: Record = {
        "unit": unit,
        "command": command_name,
        "lease": lease,
        "started": _now(),
        "state": "running",
        "code": None,
        "current": None,
    }
    _write(directory, outcome)
    codes: list[int] = []

    def done(code: int) -> int:
        codes.append(code)
        return code

    try:
        yield done
    except Exception as error:
        outcome["error"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        outcome.update(state="ended", ended=_now(), code=codes[-1] if codes else None, current=current())
        _write(directory, outcome)


def mark_seen(directory: str) -> None:
    """A run gives its deploy lock back: whatever switch outcome is there, this run saw it."""
    outcome = read(directory)
    if outcome is not None and outcome.get("state") == "ended" and not outcome.get("seen"):
        outcome["seen"] = True
        _write(directory, outcome)


def describe(outcome: Record) -> str:
    """'switch sglang-pve-switch-1764600000000.service (apply of run 3f9c0a1b) ended 2026-...Z with exit 0'."""
    return (
        f"switch {outcome.get('unit')} ({outcome.get('command')} of run {outcome.get('lease')}) "
        f"ended {outcome.get('ended')} "
        + (f"with exit {outcome['code']}" if outcome.get("code") is not None else f"in error: {outcome.get('error')}")
    )
