"""Which handler serves which schema path: ``@route("GET", "/version")``. A path and method the
schema knows but no handler serves answers 501 "Method '...' not implemented", like PVE for
something it lacks."""

from dataclasses import dataclass

ROUTES: dict[tuple[str, str], object] = {}


@dataclass
class WithTotal:
    """A handler's answer with `$rpcenv->set_result_attrib('total', ...)`: pve-http-server's
    Formatter/Standard.pm prepare_response_data puts a non-zero total beside `data`."""

    data: list
    total: int


def route(method: str, template: str):
    def register(fn):
        ROUTES[(method, template)] = fn
        return fn

    return register


def handler(method: str, template: str):
    from . import (  # noqa: F401
        api_cluster,
        api_config,
        api_lxc,
        api_node,
        api_snapshot,
        api_status,
        api_storage,
        api_tasks,
    )

    return ROUTES.get((method, template))
