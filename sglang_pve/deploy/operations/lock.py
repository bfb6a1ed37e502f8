"""The container's deploy lock around a task: one run at a time changes a container's files,
venvs and releases (agent/lease.py holds it; deploy/facts/lock.py says why facts take it).

A task takes it at its first change, not before its first read (deploys/locked.py): a run that
finds nothing to change takes nothing, writes nothing and gives nothing back (two remote commands
fewer per container, and no lease or count written). That is safe because
the run read the lock's count (facts/lock.py LockCount) before anything the lock guards: the lock,
taken then with that count expected, is refused when another run or agent command took it since
(what this run decided from may have changed; it changed nothing yet). Where the count was odd
(the lock held, or a holder killed) the lock is taken before the task's first read, as it was.
"""

import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pyinfra import host, logger, state
from pyinfra.api import OperationError, operation

from sglang_pve.config.safe import printable
from sglang_pve.deploy.facts.lock import DeployLock, DeployLockHolder, DeployUnlock, LockResult
from sglang_pve.deploy.real_host import real_host


@dataclass
class _Taking:
    """This run's deploy lock on one host, as held() left it for its task."""

    token: str
    owner: str
    task: str
    wait_s: int
    expect: int | None  # the count to take it at, at the first change; None: taken before the task's reads
    taken: bool = False


_runs: "weakref.WeakKeyDictionary[object, _Taking]" = weakref.WeakKeyDictionary()  # pyinfra Host -> its taking


def lazy(count: int | None) -> bool:
    """The lock can wait for the first change: the count was read, and it was free then (even)."""
    return count is not None and count % 2 == 0


@operation()
def held(token: str, owner: str, task: str, wait_s: int, expect: int | None = None):
    """
    Take the container's deploy lock for the rest of this run; wait up to `wait_s` seconds
    while another run holds it (0: refuse at once), naming that run.

    + token: this run's (provenance.run_token); the release operations pass it to the agent
    + owner: who runs it (provenance.who), named to a run that waits
    + task: the task, named the same way
    + wait_s: how long to wait (host data wait_lock)
    + expect: the lock's count the run read first (LockCount); even (free then): taken only at the
      first command of an operation guarded() after this one, with that count expected

    The lock goes with the run's last operation (released), or by itself when the controller's
    SSH connection ends. At prepare time (--dry, or before the confirmation prompt) it is only read:
    who holds it is said, nothing is taken or written (deploy/facts/lock.py).

    **Example:**

    .. code:: python

        held(token=run_token(), owner=who(), task="deploy", wait_s=3600, expect=basics().lock_count)
    """
    if not state.is_executing:
        other = host.get_fact(DeployLockHolder)
        if other:
            then = "the run would refuse at once (wait_lock=0)" if wait_s <= 0 else f"the run waits up to {wait_s}s"
            logger.warning(
                f"{host.print_prefix}the deploy lock is held now, "
                + printable(f"by {other.get('owner')} ({other.get('task')}) since {other.get('started')}")
                + f"; {then}"
            )
        host.noop(f"deploy lock read, not taken: taken when the run executes ({'held' if other else 'free'} now)")
        return
    taking = _Taking(token, owner, task, wait_s, expect if lazy(expect) else None)
    _runs[real_host(host)] = taking
    if taking.expect is not None:
        host.noop(f"deploy lock free at this run's first read (count {expect}): taken at its first change, if any")
        return
    result = _take(taking)
    host.noop(printable(result.message) if result.agent else "no agent on the host yet: nothing to lock")
    return
    yield  # an operation is a generator; this one runs no command of its own


def _take(taking: _Taking) -> LockResult:
    """Tried at once first (one command when it is free); waited for only when another run holds
    it, named before the wait. Raises when it is not this run's in the end."""
    args: dict[str, str | int] = {"token": taking.token, "owner": taking.owner, "task": taking.task}
    if taking.expect is not None:
        args["expect"] = taking.expect
    result = host.get_fact(DeployLock, wait_s=0, **args)
    if not result.held and taking.wait_s > 0:
        other = result.holder
        if other and other.get("token") != taking.token:
            logger.info(
                f"{host.print_prefix}waiting up to {taking.wait_s}s for the deploy lock, "
                + printable(f"held by {other.get('owner')} ({other.get('task')}) since {other.get('started')}")
            )
        result = host.get_fact(DeployLock, wait_s=taking.wait_s, **args)
    if not result.held:
        raise OperationError(f"{host.name}: {printable(result.message)}")
    taking.taken = True
    return result


def guarded(commands: Callable[[], Iterator]) -> Callable[[], Iterator]:
    """An operation's command generator whose first command comes after this run's deploy lock:
    taken then where held() left it for the first change (its decision came from reads made
    under the count it expects)."""

    def generator() -> Iterator:
        first = True
        for command in commands():
            if first and state.is_executing:
                taking = _runs.get(real_host(host))
                if taking is not None and not taking.taken:
                    result = _take(taking)
                    logger.info(f"{host.print_prefix}{printable(result.message)} (this run's first change)")
            first = False
            yield command

    return generator


@operation()
def released(token: str):
    """
    Give the deploy lock of this run back (the run's last operation); nothing where the run never
    took it (it changed nothing under it).

    + token: as for held()

    **Example:**

    .. code:: python

        released(token=run_token())
    """
    if not state.is_executing:  # held() took nothing at prepare time
        host.noop("not taken before the run executes: nothing to give back")
        return
    taking = _runs.pop(real_host(host), None)
    if taking is not None and not taking.taken:
        host.noop("deploy lock never taken: this run changed nothing under it")
        return
    host.noop(host.get_fact(DeployUnlock, token=token) or "no agent on the host: no lock")
    return
    yield
