"""The container's deploy lock around a task: one run at a time changes a container's files,
venvs and releases (agent/lease.py holds it; deploy/facts/lock.py says why facts take it)."""

from pyinfra import host, logger, state
from pyinfra.api import OperationError, operation

from sglang_pve.config.safe import printable
from sglang_pve.deploy.facts.lock import DeployLock, DeployLockHolder, DeployUnlock


@operation()
def held(token: str, owner: str, task: str, wait_s: int):
    """
    Take the container's deploy lock for the rest of this run; wait up to `wait_s` seconds
    while another run holds it (0: refuse at once), naming that run.

    + token: this run's (provenance.run_token); the release operations pass it to the agent
    + owner: who runs it (provenance.who), named to a run that waits
    + task: the task, named the same way
    + wait_s: how long to wait (host data wait_lock)

    The lock goes with the run's last operation (released), or by itself when the controller's
    SSH connection ends. At prepare time (--dry, or before the confirmation prompt) it is only read:
    who holds it is said, nothing is taken or written (deploy/facts/lock.py).

    **Example:**

    .. code:: python

        held(token=run_token(), owner=who(), task="deploy", wait_s=3600)
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
    # tried at once first (one command when it is free); waited for only when another run holds it,
    # named before the wait
    result = host.get_fact(DeployLock, token=token, owner=owner, task=task, wait_s=0)
    if not result.held and wait_s > 0:
        other = result.holder
        if other and other.get("token") != token:
            logger.info(
                f"{host.print_prefix}waiting up to {wait_s}s for the deploy lock, "
                + printable(f"held by {other.get('owner')} ({other.get('task')}) since {other.get('started')}")
            )
        result = host.get_fact(DeployLock, token=token, owner=owner, task=task, wait_s=wait_s)
    if not result.held:
        raise OperationError(f"{host.name}: {printable(result.message)}")
    host.noop(printable(result.message) if result.agent else "no agent on the host yet: nothing to lock")
    return
    yield  # an operation is a generator; this one runs no command of its own


@operation()
def released(token: str):
    """
    Give the deploy lock of this run back (the run's last operation).

    + token: as for held()

    **Example:**

    .. code:: python

        released(token=run_token())
    """
    if not state.is_executing:  # held() took nothing at prepare time
        host.noop("not taken before the run executes: nothing to give back")
        return
    host.noop(host.get_fact(DeployUnlock, token=token) or "no agent on the host: no lock")
    return
    yield
