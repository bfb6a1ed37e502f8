"""A replica set's rolling switch across the hosts of one operation (deploy/replicas.py names the sets).

pyinfra runs an operation on every host at once, each in its own greenlet (pyinfra 3.10
pyinfra/api/operations.py _run_single_op); a replica's switch waits in its own operation until
fewer than its set's max_unavailable members are out of the router, so the others keep serving,
while every other host goes on at once (a TP group's ranks switch together: deploy/group_switch.py). A member
whose switch failed (its gate; the agent reverted it) stops the rollout: the members still waiting
are not switched: each fails its operation with a line that says where the rollout stopped (a
failed command, not a traceback). pyinfra marks hosts failed only once the whole operation ended, so
the count is kept here: `begin` before the agent's command, `end` after it (code after a command's
yield runs only when the command succeeded); a member that began, did not end and whose operation
is over (pyinfra clears host.executing_op_hash when it returns) failed. Hosts are kept as the
Host objects, never pyinfra's context proxy, which every other member's greenlet would read as
itself (deploy/real_host.py): a failed member then never looked failed and the rest waited forever.

    yield from switching(host, lambda routed: agent_command(*routed))   # in an operation

`routed`: the agent's arguments (--router ...) for a member, [] for another host.
"""

from collections.abc import Callable, Iterator

import gevent
from pyinfra import logger, state
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand
from pyinfra.api.command import PyinfraCommand

from sglang_pve.config.safe import printable
from sglang_pve.deploy import paths, replicas
from sglang_pve.deploy.real_host import real_host

POLL_S = 0.2
_started: dict[tuple[int, str, object], dict[str, object]] = {}  # (run, set, operation) -> {host name: host}
_ended: dict[tuple[int, str, object], set[str]] = {}


def _has_sets(host) -> bool:
    data = getattr(host, "data", None)  # the operation cases' hosts have no data, nor sets
    return bool(data is not None and data.get("replica_sets"))


class Stopped(OperationError):
    """Another member of the set failed: this one is not switched."""


def switching(host, command: Callable[[list], PyinfraCommand], restart: bool = False) -> Iterator[PyinfraCommand]:
    """An operation's switch on `host`: `command(routed)` once the host may leave its router, or
    a failed step that says why not once the rollout stopped. `restart`: a container restart
    provisioning owes (provision/fleet_restart.py), not a switch: said so when it stops."""
    try:
        routed = begin(host, restart)
    except Stopped as stopped:
        yield refused_step(str(stopped))
        return
    yield command(routed)
    end(host)


def refused_step(why: str) -> FunctionCommand:
    """A step that fails the operation on its host, logging `why` (no traceback)."""
    return FunctionCommand(_refused, (why,), {})


def _refused(state, host, why: str) -> bool:
    host.log_styled(why, fg="red", log_func=logger.error)
    return False  # pyinfra fails the operation on this host ("executed 0 commands")


def begin(host, restart: bool = False) -> list:
    """The agent's --router arguments for a replica, once it may leave the router (Stopped once
    another member of its set failed; `restart`: in a rolling restart, switching's)."""
    host = real_host(host)
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
            raise Stopped(
                f"not restarted: the rolling restart of replica set {name} stopped at {', '.join(failed)} (its "
                "restart or its return to the router failed; see its output above)"
                if restart
                else f"not switched: the rolling switch of replica set {name} stopped at "
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
    host = real_host(host)
    found = replicas.member_of(host) if _has_sets(host) else None
    if found is not None:
        _ended.setdefault((id(state), found[0], getattr(host, "executing_op_hash", None)), set()).add(host.name)


def router_command(verb: str, routed: list, *extra: str) -> StringCommand:
    """The agent's router-leave (`routed`: begin's --router URL --address ADDR --drain-s S) or
    router-join (the same less --drain-s, which is leave's own; `extra`: e.g. --wait-s S)."""
    if verb != "router-leave" and "--drain-s" in routed:
        routed = routed[: routed.index("--drain-s")]
    return StringCommand(
        "python3", QuoteString(paths.AGENT), verb, "--dir", QuoteString(paths.RELEASES_DIR), *routed, *extra
    )


def router_step(host, verb: str, routed: list, *extra: str) -> bool:
    """router_command on `host` at execution time, its lines shown; whether it succeeded."""
    ok, output = host.run_shell_command(router_command(verb, routed, *extra), print_output=False)
    for line in output.output_lines:
        logger.info(f"{host.print_prefix}  {printable(line)}")
    return ok
