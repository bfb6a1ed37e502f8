"""A replica set's rolling switch across the hosts of one operation (deploy/replicas.py names the sets).

pyinfra runs an operation with `_parallel=N` in batches of N hosts, one batch after another
(pyinfra 3.10 pyinfra/api/operations.py _run_single_op); the deploys pass the sets' max_unavailable, so at most
that many replicas are out of their router at once. A replica whose switch fails (its gate; the
agent reverts it) stops the rollout: the members of its set in later batches are not switched,
and say why. pyinfra fails hosts only once the whole operation ended, so the operation's own
generator keeps the count: `begin` before the agent's command, `end` after it (code after a
command's yield runs only when the command succeeded).

    args = begin(host)          # agent arguments (--router ...) for a member; [] for another host
    yield agent_command(*args)
    end(host)
"""

from pyinfra import state
from pyinfra.api import OperationError, QuoteString

from sglang_pve.deploy import replicas

_started: dict[tuple[int, str], dict[str, int]] = {}  # (run, set) -> {host: batch}
_ended: dict[tuple[int, str], set[str]] = {}


def _has_sets(host) -> bool:
    data = getattr(host, "data", None)  # the operation cases' hosts have no data, nor sets
    return bool(data is not None and data.get("replica_sets"))


def parallel() -> int | None:
    """The batch size for operations that switch replicas (None: no replica sets, all at once)."""
    sets = replicas.replica_sets() if state.inventory else {}
    return min(rs.max_unavailable for rs in sets.values()) if sets else None


def _batch(host) -> int:
    hosts = list(state.inventory.get_active_hosts())
    size = parallel() or len(hosts) or 1
    return hosts.index(host) // size if host in hosts else 0


def begin(host) -> list:
    """The agent's --router arguments for a replica (refused once an earlier one of its set failed)."""
    found = replicas.member_of(host) if _has_sets(host) else None
    if found is None:
        return []
    name, replica_set = found
    key = (id(state), name)
    started, ended = _started.setdefault(key, {}), _ended.setdefault(key, set())
    batch = _batch(host)
    failed = sorted(h for h, b in started.items() if b < batch and h not in ended)
    if failed:
        raise OperationError(
            f"{host.name}: not switched: the rolling switch of replica set {name} stopped at "
            f"{', '.join(failed)} (its switch failed and was reverted; see its output above)"
        )
    started[host.name] = batch
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
        _ended.setdefault((id(state), found[0]), set()).add(host.name)
