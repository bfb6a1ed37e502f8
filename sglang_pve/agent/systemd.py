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


def in_states(units: list[str], states: Collection[str]) -> list[str]:
    """Those of `units` whose ActiveState is one of `states` (RUNNING, HOLDING, STOPPED), in order."""
    found = show(units, ["ActiveState"])
    return [unit for unit in units if found.get(unit, {}).get("ActiveState") in states]


def main_pid(unit: str) -> int | None:
    value = _systemctl(["show", "-p", "MainPID", "--value", unit]).strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def restart_no_block(unit: str) -> None:
    _systemctl(["restart", "--no-block", unit])


def _systemctl(args: list[str]) -> str:
    tool = overrides.systemctl()
    if tool is None:
        raise SystemdError("systemctl not found")
    try:
        done = bounded.run([tool, *args], TIMEOUT_S)
    except (OSError, bounded.Timeout) as error:
        raise SystemdError(f"systemctl {' '.join(args)}: {error}") from None
    if done.returncode != 0:
        raise SystemdError(f"systemctl {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout
