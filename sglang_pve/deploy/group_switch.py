"""A TP group's ranks act as one in a release, a switch and a rollback (config/tp_group.py names the
groups): every rank of the group in this operation adopts what runs, or every rank switches; a
switch that fails on any rank reverts every rank, together.

    rank = member(host)                     # None: no TP group's member
    if rank.adopts(unchanged):              # every rank's release runs and is ready: no restart anywhere
        ...
    yield from rank.switched(command, units, revert)

Why together. SGLang's ranks meet at rank 0's TCPStore on the dist-init port and hold a
connection to it for their whole life (agent/peers.py): a rank restarted alone cannot rejoin its
running group, and a rank that starts while another still runs the other release joins a group of
two releases. Each rank ran its own switch, and its own revert, at its own time: in the scale lab
a new rank 1 joined rank 0's old server, lost it when rank 0's switch stopped it, reverted alone,
and its old server joined rank 0's new one (tests/lab/scale/test_tp_group_lab.py). So:

- adopt: only when every rank's release is identical to its current one and every rank's server
  runs and is ready (the agent's releases report, agent/switch.py ready); one rank that is not
  makes the whole group switch, never a partial restart of a running group;
- switch: every rank stops what runs (`systemctl stop`; ExecStopPost returns once its node's GPUs
  are verified free, agent/reaper.py) before any rank starts; then each rank's agent switches
  without a revert of its own (--no-revert: its start and gate, readiness per rank as SGLang
  defines it, agent/gate.py);
- revert: once every rank's switch ended, one that failed (or whose operation ended without one)
  makes every rank stop again, before any starts, and run the release that ran before again
  (agent revert: stop, GPUs free, start, gate), also a rank whose own start passed; the operation
  then fails on every rank naming the ranks that failed; a rank whose revert fails fails with the
  agent's words.

pyinfra runs an operation on every host at once, each in its own greenlet (pyinfra 3.10
pyinfra/api/operations.py _run_single_op), and the ranks meet here: each posts what it has done
in a book of this run, operation and phase, and waits for every other rank that is still in the
operation (it has it and has not completed it, pyinfra api/operations.py run_host_op and
OperationMeta.set_complete; a nested operation runs within its host's executing one) until that
rank posted too or its operation ended (`taking_part` marks the end, also of an operation that
raised).
"""

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gevent
from paramiko import SSHException
from pyinfra import host as context_host
from pyinfra import logger, state
from pyinfra.api import StringCommand
from pyinfra.api.command import PyinfraCommand
from pyinfra.api.util import print_host_combined_output

from sglang_pve.deploy.real_host import real_host
from sglang_pve.deploy.rollout import refused_step

POLL_S = 0.2
NO_REVERT = ["--no-revert"]  # the agent's switch of a rank: its group reverts as one
# (run, group, operation, scope, phase) -> {host: value}; the scope tells apart the operations nested in one
# operation (deploy_when_provisioned: a new container's deploy), which share their host's executing_op_hash
_books: dict[tuple[int, str, object, str, str], dict[str, object]] = {}


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def group_of(host) -> tuple[str, list[str]] | None:
    """(group name, its members' short names in rank order) of the TP group `host` is a member of."""
    data = getattr(host, "data", None)  # the operation cases' hosts have no data
    groups = data.get("tp_groups") if data is not None else None
    for name, group in sorted((groups or {}).items()):
        members = list(group.get("members") or [])
        if _short(host.name) in members:
            return name, members
    return None


def _in_op(peer, op) -> bool:
    """`peer` is in operation `op` of this run, or has still to run it."""
    if getattr(peer, "executing_op_hash", None) == op:
        return True  # also a nested operation's host: its outer operation runs
    data = state.ops.get(peer, {}).get(op)
    return data is not None and peer in state.active_hosts and not data.operation_meta.is_complete()


@dataclass(frozen=True)
class Rank:
    """A member of TP group `group` in the operation its host runs now."""

    host: Any
    group: str
    peers: tuple  # the group's other members in the inventory
    scope: str = ""  # the operation's kind (taking_part's): books of one operation nested beside another apart

    def _book(self, phase: str) -> dict[str, object]:
        op = getattr(self.host, "executing_op_hash", None)
        return _books.setdefault((id(state), self.group, op, self.scope, phase), {})

    def post(self, phase: str, value: object = True) -> None:
        self._book(phase)[self.host.name] = value

    def wait(self, phase: str) -> dict[str, object]:
        """The book of `phase` once every other rank still in this operation posted in it."""
        book, ended = self._book(phase), self._book("ended")
        op = getattr(self.host, "executing_op_hash", None)
        gevent.sleep(0)  # the ranks' greenlets of this operation have all begun (spawned together)
        while any(p.name not in book and p.name not in ended and _in_op(p, op) for p in self.peers):
            gevent.sleep(POLL_S)
        return book

    def adopts(self, unchanged: bool) -> bool:
        """Whether the group adopts what runs: every rank's release is unchanged, runs and is ready
        (`unchanged`: this rank's). Planning (--dry) waits for no one: this rank's own view."""
        if not state.is_executing:
            return unchanged
        self.post("vote", unchanged)
        votes = self.wait("vote")
        return all(votes.get(p.name, True) for p in (self.host, *self.peers))

    def stopped_together(self, units: list[str], phase: str = "stopped") -> Iterator[PyinfraCommand]:
        if units:
            yield StringCommand("systemctl", "stop", "--", *sorted(units))
        self.post(phase)
        self.wait(phase)

    def switched(
        self, command: PyinfraCommand, units: list[str], revert: Callable[[str], PyinfraCommand] | None
    ) -> Iterator[PyinfraCommand]:
        """Every rank stops, then `command` (the agent's switch with NO_REVERT); when it failed on
        any rank, every rank stops again and runs `revert(why)` (None: no release ran before: every
        rank stays stopped), and the operation fails naming the ranks that failed."""
        yield from self.stopped_together(units)
        yield _Recorded(command, self)
        outcomes, ended = self.wait("switched"), self._book("ended")
        ranks = (self.host, *self.peers)
        failed = [_short(p.name) for p in ranks if outcomes.get(p.name) is False or p.name in ended.keys() - outcomes]
        if not failed:
            return
        why = f"TP group {self.group}: the switch failed on {', '.join(sorted(failed))}"
        yield from self.stopped_together(units, "reverting")
        if revert is not None:
            yield revert(why)  # a revert that fails fails this rank's operation with the agent's words
        back = "every rank runs the release that ran before it again" if revert else "no release ran before it"
        yield refused_step(f"{why}: every rank stopped before any started again; {back} (see the output above)")


class _Recorded(PyinfraCommand):
    """`command`, whose outcome the rank posts: the operation goes on after a failure too (the
    group's revert follows), its output shown as pyinfra shows a failed command's."""

    def __init__(self, command: PyinfraCommand, rank: Rank):
        super().__init__()
        self.command, self.rank = command, rank

    def __repr__(self) -> str:
        return repr(self.command)

    def __str__(self) -> str:
        return str(self.command)

    def execute(self, state, host, connector_arguments) -> bool:
        try:
            ok, output = self.command.execute(state, host, connector_arguments)
        except (TimeoutError, OSError, SSHException) as error:
            host.log_styled(f"{type(error).__name__}: {error}", fg="red", log_func=logger.error)
            ok, output = False, None
        if not ok and output is not None and not state.print_output:
            print_host_combined_output(host, output)
        self.rank.post("switched", bool(ok))
        return True


def member(host, scope: str = "") -> Rank | None:
    """`host` as a rank of its TP group, or None; `scope`: its operation's (taking_part's), if not the release's."""
    host = real_host(host)
    found = group_of(host)
    if found is None:
        return None
    name, members = found
    others = [m for m in members if m != _short(host.name)]
    return Rank(host, name, tuple(h for h in state.inventory if _short(h.name) in others), scope)


def stopped_together(host, units: list[str]) -> Iterator[PyinfraCommand]:
    """A rank stops `units` and waits for the others to stop theirs (nothing for other hosts)."""
    rank = member(host)
    if rank is not None:
        yield from rank.stopped_together(units)


def taking_part(op, scope: str = ""):
    """An operation's generator function whose end (also by an exception or a failed command) its
    TP group's other ranks see: they wait for nothing more from it. `scope`: its ranks' (member(host,
    scope)) when it is not a release operation, whose books it must not touch."""

    @functools.wraps(op)
    def generator(*args, **kwargs):
        try:
            yield from op(*args, **kwargs)
        finally:
            rank = member(context_host, scope)
            if rank is not None and state.is_executing:
                rank.post("ended")

    return generator
