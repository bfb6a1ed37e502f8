"""Node-level endpoints: version, nodes, node status, next free vmid, storage, tasks."""

import os
import re
import time

from .errors import ApiError, param_error
from .node import VERSIONS, Node, Request
from .routes import WithTotal, route
from .tasks import parse_upid, status_type


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
    """Tasks.pm read_task_status / read_task_log: upid_decode first, then the task."""
    node.check_node(req.params["node"])
    upid = req.params["upid"]
    if parse_upid(upid) is None:
        raise param_error({"upid": "unable to parse worker upid"})
    task = node.tasks.get(upid)
    if task is None:
        raise param_error({"upid": "no such task"})
    return task


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def task_status(node: Node, req: Request):
    return _task(node, req).status()


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def task_log(node: Node, req: Request):
    """pve-common Tools.pm dump_logfile: lines numbered from 1, `limit` 0 reads to the end,
    an empty log reads as one line "no content"; the line count as `total`."""
    lines = _task(node, req).log.lines
    start = int(req.params.get("start", 0))
    limit = int(req.params.get("limit", 50))
    numbered = [{"n": i + 1, "t": t} for i, t in enumerate(lines)] or [{"n": 1, "t": "no content"}]
    return WithTotal(numbered[start : start + limit] if limit else numbered[start:], max(len(lines), 1))


@route("GET", "/nodes/{node}/tasks")
def task_index(node: Node, req: Request):
    """Tasks.pm node_tasks: finished tasks newest first (source archive), running ones (source
    active) with status RUNNING, or both (all); the filters as PVE applies them, `total` the
    count that passed them. The emulator's users see every task (root@pam holds Sys.Audit)."""
    p = req.params
    source = p.get("source", "archive")
    errors = p.get("errors") in ("1", True)
    wanted = {"ok", "warning", "error", "unknown"}
    if "statusfilter" in p and not errors:
        wanted = {s.strip().lower() for s in re.split(r"[;,\s]+", p["statusfilter"]) if s.strip()}
    elif errors:
        wanted.discard("ok")
    res, count = [], 0
    start, limit = int(p.get("start", 0)), int(p.get("limit", 50))
    tasks = node.tasks.newest_first()
    active = [t for t in tasks if not t.done.is_set()] if source in ("active", "all") else []
    archived = [t for t in tasks if t.done.is_set()] if source != "active" else []
    for task in active + archived:
        entry = task.index_entry()
        if p.get("userfilter") and p["userfilter"].lower() not in entry["user"].lower():
            continue
        if p.get("typefilter") and entry["type"] != p["typefilter"]:
            continue
        if p.get("vmid") and entry["id"] != p["vmid"]:
            continue
        if "since" in p and entry["starttime"] < int(p["since"]):
            continue
        if "until" in p and entry["starttime"] > int(p["until"]):
            continue
        if status_type(task.exitstatus if task.done.is_set() else None) not in wanted:
            continue
        count += 1
        if count > start and len(res) < limit:
            res.append(entry)
    return WithTotal(res, count)
