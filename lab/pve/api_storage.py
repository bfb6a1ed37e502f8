"""A storage's configuration and status (pve-storage src/PVE/API2/Storage/Config.pm read,
src/PVE/API2/Storage/Status.pm read_status), as clients ask before they allocate or snapshot."""

from .errors import ApiError, param_error
from .node import Node, Request
from .routes import route


@route("GET", "/storage/{storage}")
def storage_config(node: Node, req: Request):
    """Config.pm read: the storage.cfg section (storage_config dies for an unknown id)."""
    sid = req.params["storage"]
    node.check_priv(req.ident, f"/storage/{sid}", "Datastore.Allocate")
    found = node.storages.config(sid)
    if found is None:
        raise ApiError(f"storage '{sid}' does not exist")
    return found


@route("GET", "/nodes/{node}/storage/{storage}/status")
def storage_status(node: Node, req: Request):
    """Status.pm read_status: storage_info's entry, or 400 "No such storage." on `storage`."""
    node.check_node(req.params["node"])
    sid = req.params["storage"]
    node.check_priv(req.ident, f"/storage/{sid}", "Datastore.Audit")
    found = node.storages.status(sid)
    if found is None:
        raise param_error({"storage": "No such storage."})
    return found
