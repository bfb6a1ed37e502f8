"""Node-level endpoints: version, nodes, node status, next free vmid, storage, subscription,
replication jobs, VMs (none: this node runs containers only)."""

import hashlib
import os

from . import stats
from .errors import ApiError, param_error
from .node import VERSIONS, Node, Request
from .routes import route


@route("GET", "/version")
def version(node: Node, req: Request):
    return dict(VERSIONS[node.version])


@route("GET", "/nodes")
def nodes(node: Node, req: Request):
    """pve-manager PVE/API2/Nodes.pm index: extract_node_stats plus the node certificate's
    fingerprint (PVE::Cluster::get_node_fingerprint), which clients pin."""
    entry = stats.node_stats(node)
    if node.ssl_fingerprint:
        entry["ssl_fingerprint"] = node.ssl_fingerprint
    return [entry]


@route("GET", "/nodes/{node}/status")
def node_status(node: Node, req: Request):
    node.check_node(req.params["node"])
    info = VERSIONS[node.version]
    uname = os.uname()
    now = stats.node_stats(node)
    total, used = now["maxmem"], now["mem"]
    disk_total, disk_used = now["maxdisk"], now["disk"]
    return {
        "pveversion": f"pve-manager/{info['version']}/{info['repoid']}",
        "kversion": f"{uname.sysname} {uname.release} {uname.version}",
        "current-kernel": {
            "sysname": uname.sysname,
            "release": uname.release,
            "version": uname.version,
            "machine": uname.machine,
        },
        "boot-info": {"mode": "efi", "secureboot": 0},
        "uptime": now["uptime"],
        "loadavg": [f"{x:.2f}" for x in os.getloadavg()],
        "cpu": now["cpu"],
        "wait": 0,
        "idle": 0,
        "cpuinfo": {"cpus": os.cpu_count(), "sockets": 1, "cores": os.cpu_count(), "model": "emulated"},
        "memory": {"total": total, "used": used, "free": total - used, "available": total - used},
        "swap": {"total": 0, "used": 0, "free": 0},
        "rootfs": {
            "total": disk_total,
            "used": disk_used,
            "avail": disk_total - disk_used,
            "free": disk_total - disk_used,
        },
    }


@route("GET", "/cluster/nextid")
def nextid(node: Node, req: Request):
    used = set(node.vmids())
    if "vmid" in req.params:
        vmid = int(req.params["vmid"])
        if vmid in used:
            raise param_error({"vmid": f"VM {vmid} already exists"})
        return str(vmid)
    return str(next(i for i in range(100, 1_000_000_000) if i not in used))


@route("GET", "/nodes/{node}/storage")
def storage_index(node: Node, req: Request):
    node.check_node(req.params["node"])
    content = req.params.get("content")
    return [s for s in node.storages.listing() if not content or content in s["content"].split(",")]


@route("GET", "/nodes/{node}/storage/{storage}/content")
def storage_content(node: Node, req: Request):
    node.check_node(req.params["node"])
    sid = req.params["storage"]
    if node.storages.get(sid) is None:
        raise ApiError(f"storage '{sid}' does not exist")
    content = req.params.get("content")
    items = node.storages.templates(sid) if content in (None, "vztmpl") else []
    return items


@route("GET", "/nodes/{node}/subscription")
def subscription(node: Node, req: Request):
    """pve-manager PVE/API2/Subscription.pm get without /etc/subscription: "notfound"; the
    server id (of the node's hardware addresses on PVE) derived from the node's name here."""
    node.check_node(req.params["node"])
    return {
        "status": "notfound",
        "message": "There is no subscription key",
        "url": "https://www.proxmox.com/en/proxmox-virtual-environment/pricing",
        "serverid": hashlib.md5(node.name.encode()).hexdigest().upper(),
    }


@route("GET", "/nodes/{node}/replication")
def replication(node: Node, req: Request):
    """pve-manager PVE/API2/Replication.pm index: this node's jobs; the emulator has none."""
    node.check_node(req.params["node"])
    return []


@route("GET", "/nodes/{node}/qemu")
def vm_list(node: Node, req: Request):
    """qemu-server's vmlist: the toolkit's nodes run containers only; the emulator has no VMs."""
    node.check_node(req.params["node"])
    return []
