"""What the node says about itself and its guests, for every read that reports it: one source for
`GET .../lxc`, `.../status/current`, `/nodes`, `/nodes/{node}/status` and `/cluster/resources`.

- A container: pve-container src/PVE/LXC.pm vmstatus (commit 94f5585): name is the hostname
  without whitespace or ``CT<vmid>``, cpus the cores (else cpulimit, else the node's CPUs),
  maxmem ``memory`` (default 512) MiB, maxswap ``swap`` (default 0) MiB, maxdisk the rootfs
  size (default 4 GiB); the counters (mem, disk, cpu, netin, ...) are what the container's
  cgroups say; the backend has none, so they read 0, as for a stopped one. PVE 9 adds the
  cgroup pressures of a running one.
- The node: pve-manager PVE/API2Tools.pm extract_node_stats (commit 14a22df) from the node's
  RRD data as pvestatd writes it: uptime, cpu, memory and root filesystem of the machine the
  emulator runs on (/proc/meminfo, the load average, statvfs of /), level '' (no subscription).
"""

import os
import re
import time

from .validate import parse_boolean

GIB = 1 << 30
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
PRESSURES = ("cpusome", "cpufull", "iosome", "iofull", "memorysome", "memoryfull")


def size_bytes(text: str) -> int | None:
    """pve-common JSONSchema.pm parse_size: ``8G`` -> bytes (no unit: bytes)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT])?", text.strip())
    return int(float(m[1]) * _UNITS.get(m[2] or "", 1)) if m else None


def rootfs_size(rootfs: str | None) -> int:
    for part in (rootfs or "").split(","):
        if part.startswith("size="):
            return size_bytes(part[len("size=") :]) or 4 * GIB
    return 4 * GIB


def vmstatus(node, vmid: int, config) -> dict:
    """LXC.pm vmstatus for one container, from its parsed config."""
    cur = config.current
    status = node.backend.status(vmid)
    cpus = cur.get("cores") or cur.get("cpulimit")
    res = {
        "vmid": vmid,
        "type": "lxc",
        "status": status,
        "name": re.sub(r"\s", "", cur.get("hostname") or f"CT{vmid}"),
        "cpus": _number(cpus) if cpus and _number(cpus) else os.cpu_count() or 1,
        "disk": 0,
        "maxdisk": rootfs_size(cur.get("rootfs")),
        "mem": 0,
        "swap": 0,
        "maxmem": int(cur.get("memory") or 512) << 20,
        "maxswap": int(cur.get("swap") or 0) << 20,
        "uptime": 0,
        "cpu": 0,
        "netout": 0,
        "netin": 0,
        "diskread": 0,
        "diskwrite": 0,
    }
    if "tags" in cur:
        res["tags"] = cur["tags"]
    if parse_boolean(str(cur.get("template", "0"))) == "1":
        res["template"] = 1
    if cur.get("lock"):
        res["lock"] = cur["lock"]
    if status == "running" and node.version >= 9:
        res.update({f"pressure{p}": 0 for p in PRESSURES})
    return res


def _number(value):
    text = str(value)
    return float(text) if "." in text else int(text)


def host_memory() -> tuple[int, int]:
    """(total, used) bytes of the machine, used = total - available (pvestatd's meminfo)."""
    info = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    total = info.get("MemTotal", 1 << 34)
    return total, total - info.get("MemAvailable", total // 2)


def root_disk() -> tuple[int, int]:
    """(total, used) bytes of /."""
    st = os.statvfs("/")
    return st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize


def node_stats(node) -> dict:
    """extract_node_stats for the one node (a single-node cluster: always online)."""
    cpus = os.cpu_count() or 1
    mem_total, mem_used = host_memory()
    disk_total, disk_used = root_disk()
    return {
        "id": f"node/{node.name}",
        "node": node.name,
        "type": "node",
        "status": "online",
        "uptime": int(time.time() - node.started),
        "cpu": round(min(os.getloadavg()[0] / cpus, 1.0), 4),
        "mem": mem_used,
        "disk": disk_used,
        "level": "",
        "maxcpu": cpus,
        "maxmem": mem_total,
        "maxdisk": disk_total,
    }
