"""A TP group's ranks switch together: every rank of the group in this operation stops its server
before any rank starts the new one (config/tp_group.py names the groups).

Without it each rank ran its switch alone (pyinfra runs an operation on every host at once, but
the hosts reach their switch at different times): in the scale lab a new rank 1 joined rank 0's
old server on the dist-init port (SGLang's ranks meet at rank 0's TCPStore, agent/peers.py), lost
it when rank 0's switch stopped it, and was reverted, and its old server then joined rank 0's new
one: one group of two releases, and the run reported rank 0 switched (tests/lab/scale/
test_tp_group_lab.py). Now a rank that switches first stops what runs (`systemctl stop` of the
current release's units) and waits until every other rank of its group in this operation has
stopped too or has no switch to do (its operation is over: pyinfra clears host.executing_op_hash).

    yield from stopped_together(host, units)   # before the agent's switch command
"""

from collections.abc import Iterator

import gevent
from pyinfra import state
from pyinfra.api import StringCommand
from pyinfra.api.command import PyinfraCommand

from sglang_pve.deploy.real_host import real_host

POLL_S = 0.2
_stopped: dict[tuple[int, str, object], set[str]] = {}  # (run, group, operation) -> host names


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _group(host) -> tuple[str, list[str]] | None:
    """(group name, the other members' short names) of the TP group `host` is a member of."""
    data = getattr(host, "data", None)  # the operation cases' hosts have no data
    groups = data.get("tp_groups") if data is not None else None
    for name, group in sorted((groups or {}).items()):
        members = list(group.get("members") or [])
        if _short(host.name) in members:
            return name, [m for m in members if m != _short(host.name)]
    return None


def stopped_together(host, units: list[str]) -> Iterator[PyinfraCommand]:
    host = real_host(host)
    found = _group(host)
    if found is None:
        return
    name, others = found
    op = getattr(host, "executing_op_hash", None)
    if units:
        yield StringCommand("systemctl", "stop", "--", *sorted(units))
    stopped = _stopped.setdefault((id(state), name, op), set())
    stopped.add(host.name)
    peers = [h for h in state.inventory if _short(h.name) in others]
    while any(h.name not in stopped and getattr(h, "executing_op_hash", None) == op for h in peers):
        gevent.sleep(POLL_S)
