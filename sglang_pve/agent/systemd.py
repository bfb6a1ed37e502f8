"""The few systemctl calls the agent makes (SGLANG_PVE_SYSTEMCTL replaces the binary in tests),
the one parser of `systemctl show` and the one grouping of a unit's ActiveState.

show(["sglang-a.service", "sglang-b.service"], ["ActiveState", "MainPID"])
    -> {"sglang-a.service": {"Id": "sglang-a.service", "ActiveState": "active", "MainPID": "4242"}, ...}
"""

from collections.abc import Collection

from sglang_pve.agent import bounded, overrides

TIMEOUT_S = 20

# ActiveState, grouped as systemd groups it (https://github.com/systemd/systemd/blob/main/src/core/unit.h:
# UNIT_IS_ACTIVE_OR_ACTIVATING, UNIT_IS_INACTIVE_OR_FAILED). Every caller asks these, none spells a state list.
RUNNING = frozenset({"active", "activating", "reloading", "refreshing"})
"""Up, or on its way up (a start past its gate or still in it): "the configuration runs"."""
STOPPED = frozenset({"inactive", "failed"})
"""No process of the unit is left."""
HOLDING = RUNNING | {"deactivating"}
"""Its processes may live and hold the GPUs: RUNNING, or draining on SIGTERM until it is STOPPED.
What a switch must stop (and wait for) before it can find the GPUs free."""


STATE_PROPERTIES = ["ActiveState", "Job"]
"""What `state` reads a unit's state from."""


def state(properties: dict[str, str]) -> str | None:
    """A unit's ActiveState, but "activating" for an inactive or failed one with a job queued. At
    boot systemd queues each enabled unit's start as a job that waits for its After= units (a
    server's: network-online.target), and until the job runs ActiveState still says inactive: read
    as stopped, a deploy right after a boot switched the server again, and a switch did not stop
    the queued start, which then started the old server beside the new one. (`systemctl stop`
    cancels such a job.)"""
    active = properties.get("ActiveState")
    return "activating" if active in STOPPED and properties.get("Job") else active


class SystemdError(RuntimeError):
    pass


def parse_show(text: str | list[str]) -> list[dict[str, str]]:
    """`systemctl show -p A,B u1 u2` -> one dict per unit, in order: [{"A": ..., "B": ...}, ...].

    Units are separated by a blank line; a property seen again also starts the next unit (output
    whose blank lines were dropped, as pyinfra's fact lines are)."""
    lines = text.splitlines() if isinstance(text, str) else text
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or key in current:
            if current:
                blocks.append(current)
            current = {}
        if sep:
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


def show(units: list[str], properties: list[str]) -> dict[str, dict[str, str]]:
    """Properties of many units in ONE systemctl call, keyed by unit name."""
    if not units:
        return {}
    blocks = parse_show(_systemctl(["show", "-p", ",".join(["Id", *properties]), *units]))
    if len(blocks) == len(units):  # one block per unit, in the order asked
        return dict(zip(units, blocks, strict=True))
    return {block["Id"]: block for block in blocks if block.get("Id")}


def active_states(units: list[str]) -> dict[str, str | None]:
    """Each unit's `state`, in ONE systemctl call (None: systemd named no such unit)."""
    found = show(units, STATE_PROPERTIES)
    return {unit: state(found.get(unit, {})) for unit in units}


def in_states(units: list[str], states: Collection[str]) -> list[str]:
    """Those of `units` whose `state` is one of `states` (RUNNING, HOLDING, STOPPED), in order."""
    found = active_states(units)
    return [unit for unit in units if found[unit] in states]


def main_pid(unit: str) -> int | None:
    value = _systemctl(["show", "-p", "MainPID", "--value", unit]).strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def restart_no_block(unit: str) -> None:
    _systemctl(["restart", "--no-block", unit])


def start_no_block(unit: str) -> None:
    _systemctl(["start", "--no-block", unit])


def run_later(
    name: str, delay_s: float, command: list[str], description: str, env: dict[str, str], output: str
) -> None:
    """Run `command` once as the transient service NAME.service, `delay_s` seconds from now (a
    transient NAME.timer; at once when 0), outside the calling unit and its cgroup.

    systemd-run(1) (systemd's src/run/run.c, transient_timer_set_properties): the transient
    timer gets RemainAfterElapse=no, so it is unloaded once elapsed and its service finished;
    --collect (CollectMode=inactive-or-failed, systemd >= 236) unloads the service even when
    it failed. AccuracySec= defaults to 1 min (systemd.timer(5)): set to 100 ms so the backoff
    is what was asked. Its stdout is appended to `output` (StandardOutput=append:, systemd >=
    240, which the server unit itself needs already), as the unit's own Exec lines are, and its
    messages reach the journal by syslog (output.py), once. No version-dependent restart
    directive is used (RestartSteps=/RestartMaxDelaySec= exist only from systemd 254). A leftover
    of the same name (a pending one) is stopped first."""
    tool = overrides.systemd_run()
    if tool is None:
        raise SystemdError("systemd-run not found")
    for leftover in (f"{name}.timer", f"{name}.service"):
        try:
            _systemctl(["stop", leftover])
        except SystemdError:
            pass  # none loaded: the usual case
    args = [f"--unit={name}", f"--description={description}", "--collect", "--no-block", "--quiet"]
    args += [f"--property=StandardOutput=append:{output}", "--property=StandardError=journal"]
    args += [f"--setenv={key}={value}" for key, value in sorted(env.items())]
    if delay_s > 0:
        args += [f"--on-active={delay_s:.3f}s", "--timer-property=AccuracySec=100ms"]
    _run("systemd-run", [tool, *args, "--", *command])


def _systemctl(args: list[str]) -> str:
    tool = overrides.systemctl()
    if tool is None:
        raise SystemdError("systemctl not found")
    return _run("systemctl", [tool, *args])


def _run(name: str, argv: list[str]) -> str:
    shown = " ".join([name, *argv[1:]])
    try:
        done = bounded.run(argv, TIMEOUT_S)
    except (OSError, bounded.Timeout) as error:
        raise SystemdError(f"{shown}: {error}") from None
    if done.returncode != 0:
        raise SystemdError(f"{shown} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout
