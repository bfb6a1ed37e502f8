"""A container task's operations inside the container's deploy lock (deploy/operations/lock.py):
the outermost locked task of a run takes it first and gives it back last; the tasks it calls
(the whole deploy calls the venv, NCCL and servers tasks) run inside it without taking it again."""

import functools
from collections.abc import Callable

from pyinfra import host

from sglang_pve.deploy.context import deployment
from sglang_pve.deploy.operations import lock
from sglang_pve.deploy.provenance import run_token, who
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
                    )
                body(*args, **kwargs)
                if outer:
                    lock.released(name=f"Deploy lock given back ({task})", token=run_token())
            finally:
                _depth[host.name] -= 1

        return run

    return wrap
