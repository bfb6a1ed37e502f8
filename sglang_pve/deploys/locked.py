"""A container task's operations inside the container's deploy lock (deploy/operations/lock.py):
the outermost locked task of a run takes it first and gives it back last; the tasks it calls
(the whole deploy calls the venv, NCCL and servers tasks) run inside it without taking it again.

It is taken at the task's first change, not before its first read: its operations are guarded
(the first command of each comes after the lock), and the lock's count the run read first
(HostBasics) is expected then, so a run that changes nothing takes nothing and writes nothing. Not
where the operations run as they are added (a container's deploy nested in its node's
provisioning, deploy_when_provisioned): nothing could guard them, the lock comes first.
"""

import functools
from collections.abc import Callable

from pyinfra import host, state

from sglang_pve.deploy.context import basics, deployment
from sglang_pve.deploy.operations import lock
from sglang_pve.deploy.provenance import run_token, who
from sglang_pve.deploy.real_host import real_host
from sglang_pve.provision.roles import is_node

_depth: dict[str, int] = {}  # host name -> locked tasks being prepared for it


def locked(task: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def wrap(body: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(body)
        def run(*args, **kwargs) -> None:
            if is_node():
                body(*args, **kwargs)
                return
            outer = not _depth.get(host.name)
            guard = outer and not state.is_executing
            _depth[host.name] = _depth.get(host.name, 0) + 1
            try:
                # three calls on three lines in this order: pyinfra orders operations by call-stack lines
                if outer:
                    lock.held(
                        name=f"Deploy lock ({task})",
                        token=run_token(),
                        owner=who(),
                        task=task,
                        wait_s=deployment().data.wait_lock,
                        expect=basics().lock_count if guard else None,
                    )
                before = set(_operations()) if guard else set()
                body(*args, **kwargs)
                if guard:
                    for op_hash, op_data in _operations().items():
                        if op_hash not in before:
                            op_data.command_generator = lock.guarded(op_data.command_generator)
                if outer:
                    lock.released(name=f"Deploy lock given back ({task})", token=run_token())
            finally:
                _depth[host.name] -= 1

        return run

    return wrap


def _operations() -> dict:
    """This host's operations added so far (op hash -> pyinfra's StateOperationHostData)."""
    return state.ops.get(real_host(host), {})
