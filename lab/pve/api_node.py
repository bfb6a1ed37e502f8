"""Node-level endpoints: version, nodes, node status, next free vmid, storage, tasks."""

import os
import time

from .errors import ApiError, param_error
from .node import VERSIONS, Node, Request
from .routes import route


@route("GET", "/version")
def version(node: Node, req: Request):
    return dict(VERSIONS[node.version])


@route("GET", "/nodes")
def nodes(node: Node, req: Request):
    return [
        {
            "node": node.name,
            "status": "online",
            "type": "node",
            "id": f"node/{node.name}",
            "level": "",
            "maxcpu": os.cpu_count(),
            "cpu": 0.01,
            "maxmem": 1 << 37,
            "mem": 1 << 33,
            "maxdisk": 1 << 40,
            "disk": 1 << 32,
            "uptime": int(time.time() - node.started),
        }
    ]


@route("GET", "/nodes/{node}/status")
def node_status(node: Node, req: Request):
    node.check_node(req.params["node"])
    info = VERSIONS[node.version]
    uname = os.uname()
    total, used = 1 << 37, 1 << 33
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
        "uptime": int(time.time() - node.started),
        "loadavg": ["0.00", "0.00", "0.00"],
        "cpu": 0.01,
        "wait": 0,
        "idle": 0,
        "cpuinfo": {"cpus": os.cpu_count(), "sockets": 1, "cores": os.cpu_count(), "model": "emulated"},
        "memory": {"total": total, "used": used, "free": total - used, "available": total - used},
        "swap": {"total": 0, "used": 0, "free": 0},
        "rootfs": {"total": 1 << 40, "used": 1 << 32, "avail": (1 << 40) - (1 << 32), "free": (1 << 40) - (1 << 32)},
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


def _task(node: Node, req: Request):
    node.check_node(req.params["node"])
    task = node.tasks.get(req.params["upid"])
    if task is None:
        raise ApiError(f"no such task '{req.params['upid']}'")
    return task


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def task_status(node: Node, req: Request):
    return _task(node, req).status()


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def task_log(node: Node, req: Request):
    lines = _task(node, req).log.lines
    start = int(req.params.get("start", 0))
    limit = int(req.params.get("limit", 50))
    return [{"n": i + 1, "t": t} for i, t in enumerate(lines)][start : start + limit]
