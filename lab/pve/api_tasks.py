"""A node's tasks: status, log and list (pve-manager PVE/API2/Tasks.pm, commit 14a22df;
pve-common src/PVE/Tools.pm dump_logfile, src/PVE/UPID.pm)."""

import re

from .errors import param_error
from .node import Node, Request
from .routes import WithTotal, route
from .tasks import parse_upid, status_type


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
