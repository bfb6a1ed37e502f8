"""The host behind pyinfra's context proxy (`from pyinfra import host`).

The proxy resolves to whatever host the *calling* greenlet's context holds (pyinfra 3.10
pyinfra/context.py ContextObject, ctx_host): kept beyond the call, it names another host, or none.
A greenlet spawned for a command has no context (deploy/progress.py); a host kept for other hosts'
greenlets to read (deploy/rollout.py) would be read as each reader itself. Resolve it first.

    real_host(host)   # the Host object itself; any other object as it is
"""

from pyinfra import host as context_host
from pyinfra.context import ctx_host


def real_host(host):
    return ctx_host.get() if host is context_host else host
