"""The cluster view that clients start with (pve-manager PVE/API2/Cluster.pm resources and
get_status, PVE/API2/Cluster/BackupInfo.pm, commit 14a22df), for the emulator's one node that
is in no cluster: prometheus-pve-exporter's first call is `GET /cluster/resources`.
"""

import socket

from . import stats
from .node import Node, Request
from .routes import route

PVE_VERSION_WITH_NETWORK = 9  # the `network` resource type (the schema's enum has it from PVE 9)


def _storage_entries(node: Node) -> list[dict]:
    """API2Tools.pm extract_storage_stats per storage, from its status (RRD: total, used)."""
    return [
        {
            "id": f"storage/{node.name}/{s['storage']}",
            "storage": s["storage"],
            "node": node.name,
            "type": "storage",
            "plugintype": s["type"],
            "status": "available" if s.get("active") else "unknown",
            "shared": s.get("shared", 0),
            "content": ",".join(sorted(filter(None, s.get("content", "").split(",")))),
            "maxdisk": s.get("total", 0),
            "disk": s.get("used", 0),
        }
        for s in node.storages.listing()
    ]


def _vm_entries(node: Node) -> list[dict]:
    """API2Tools.pm extract_vm_stats from the RRD data pvestatd's update_lxc_status writes
    (vmstatus; a stopped CT's counters 0), plus the config's lock and tags."""
    res = []
    for vmid, config in node.configs():
        d = stats.vmstatus(node, vmid, config)
        entry = {
            "id": f"lxc/{vmid}",
            "vmid": vmid,
            "node": node.name,
            "type": "lxc",
            "status": d["status"],
            "uptime": d["uptime"],
            "name": d["name"],
            "template": d.get("template", 0),
            "maxcpu": d["cpus"],
            **{k: d[k] for k in ("cpu", "maxmem", "mem", "maxdisk", "disk", "netin", "netout", "diskread")},
            "diskwrite": d["diskwrite"],
        }
        if node.version >= PVE_VERSION_WITH_NETWORK:
            entry["memhost"] = 0  # the pve-vm-9.0 RRD schema's field (host view of a VM's memory)
        for key in ("lock", "tags"):
            if key in d:
                entry[key] = d[key]
        res.append(entry)
    return res


def _network_entries(node: Node) -> list[dict]:
    """The default "localnetwork" zone PVE 9 lists for every node."""
    if node.version < PVE_VERSION_WITH_NETWORK:
        return []
    return [
        {
            "id": f"network/{node.name}/zone/localnetwork",
            "type": "network",
            "network-type": "zone",
            "network": "localnetwork",
            "node": node.name,
            "status": "ok",
        }
    ]


@route("GET", "/cluster/resources")
def resources(node: Node, req: Request):
    """Cluster.pm resources: guests (type vm), nodes, storages, in that order, filtered by
    `type`; no pools, no SDN zones beyond PVE 9's default one (which no `type` selects)."""
    kind = req.params.get("type")
    res = []
    if kind in (None, "vm"):
        res += _vm_entries(node)
    if kind in (None, "node"):
        res.append(dict(stats.node_stats(node), **{"cgroup-mode": 2}))  # static-info of a cgroup v2 node
    if kind in (None, "storage"):
        res += _storage_entries(node)
    if kind is None:
        res += _network_entries(node)
    return res


def _node_ip(name: str) -> str:
    """PVE::Cluster::remote_node_ip for a node outside a cluster: its name resolved."""
    try:
        return socket.gethostbyname(name)
    except OSError:
        return "127.0.0.1"


@route("GET", "/cluster/status")
def status(node: Node, req: Request):
    """Cluster.pm get_status without members (no cluster): one entry for the local node."""
    return [
        {
            "type": "node",
            "id": f"node/{node.name}",
            "name": node.name,
            "ip": _node_ip(node.name),
            "local": 1,
            "nodeid": 0,
            "online": 1,
            "level": "",
        }
    ]


@route("GET", "/cluster/backup-info/not-backed-up")
def not_backed_up(node: Node, req: Request):
    """BackupInfo.pm: every guest no vzdump job includes; the emulator has no backup jobs."""
    res = []
    for vmid, config in node.configs():
        entry = {"vmid": vmid, "type": "lxc"}
        if "hostname" in config.current:
            entry["name"] = config.current["hostname"]
        res.append(entry)
    return res
