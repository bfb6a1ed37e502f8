"""A replica set's rolling switch across the hosts of one operation (deploy/replicas.py names the sets).

pyinfra runs an operation on every host at once, each in its own greenlet (pyinfra 3.10
pyinfra/api/operations.py _run_single_op); a replica's switch waits in its own operation until
fewer than its set's max_unavailable members are out of the router, so the others keep serving,
while every other host (a TP group's ranks, which must switch together) goes on at once. A member
whose switch failed (its gate; the agent reverted it) stops the rollout: the members still waiting
are not switched, and say why. pyinfra marks hosts failed only once the whole operation ended, so
the count is kept here: `begin` before the agent's command, `end` after it (code after a command's
yield runs only when the command succeeded); a member that began, did not end and whose operation
is over (pyinfra clears host.executing_op_hash when it returns) failed.

    args = begin(host)          # agent arguments (--router ...) for a member; [] for another host
    yield agent_command(*args)
    end(host)
"""

import gevent
from pyinfra import state
from pyinfra.api import OperationError, QuoteString

from sglang_pve.deploy import replicas

POLL_S = 0.2
_started: dict[tuple[int, str, object], dict[str, object]] = {}  # (run, set, operation) -> {host name: host}
_ended: dict[tuple[int, str, object], set[str]] = {}


def _has_sets(host) -> bool:
    data = getattr(host, "data", None)  # the operation cases' hosts have no data, nor sets
    return bool(data is not None and data.get("replica_sets"))


def begin(host) -> list:
    """The agent's --router arguments for a replica, once it may leave the router (refused once
    another member of its set failed)."""
    found = replicas.member_of(host) if _has_sets(host) else None
    if found is None:
        return []
    name, replica_set = found
    key = (id(state), name, getattr(host, "executing_op_hash", None))
    started, ended = _started.setdefault(key, {}), _ended.setdefault(key, set())
    while True:
        out = {n: h for n, h in started.items() if n not in ended}
        failed = sorted(n for n, h in out.items() if getattr(h, "executing_op_hash", None) is None)
        if failed:
            raise OperationError(
                f"{host.name}: not switched: the rolling switch of replica set {name} stopped at "
                f"{', '.join(failed)} (its switch failed and was reverted; see its output above)"
            )
        if len(out) < replica_set.max_unavailable:
            break
        gevent.sleep(POLL_S)
    started[host.name] = host
    return [
        "--router",
        QuoteString(replicas.router_url(replica_set)),
        "--address",
        QuoteString(replicas.address(host)),
        "--drain-s",
        str(replica_set.drain_timeout_s),
    ]


def end(host) -> None:
    found = replicas.member_of(host) if _has_sets(host) else None
    if found is not None:
        _ended.setdefault((id(state), found[0], getattr(host, "executing_op_hash", None)), set()).add(host.name)
