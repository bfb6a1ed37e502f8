"""Snapshots of a container: one before every change, named with time and reason, the toolkit's
own kept to a count; rollback to the newest (or a named) one, with ZFS's rule said plainly."""

import time

from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.nodes import Node

PREFIX = "sgpve-"  # the toolkit's own snapshots (retention never touches another)


def take(node: Node, vmid: int, keep: int, reason: str, detail: str) -> str:
    """Snapshot ``sgpve-YYYYmmdd-HHMMSS-<reason>`` (its description gives the detail), then delete
    the oldest of ours beyond `keep`."""
    existing = [s["name"] for s in listed(node, vmid)]
    name = base = f"{PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{reason}"
    for n in range(2, 100):
        if name not in existing:
            break
        name = f"{base}-{n}"
    node.api.run_task("POST", node.path(vmid, "snapshot"), snapname=name, description=f"sglang-pve: {detail}"[:200])
    ours = [s for s in existing if s.startswith(PREFIX)] + [name]
    for old in ours[:-keep]:
        node.api.run_task("DELETE", node.path(vmid, "snapshot", old))
    return name


def listed(node: Node, vmid: int) -> list[dict]:
    """The container's snapshots, oldest first (without PVE's "current" entry)."""
    return sorted(
        (s for s in node.api.get(node.path(vmid, "snapshot")) if s["name"] != "current"),
        key=lambda s: (s.get("snaptime", 0), s["name"]),
    )


def rollback(node: Node, vmid: int, name: str | None) -> str:
    """Roll back to `name` (default: the newest snapshot) and start the container again; the name."""
    snapshots = [s["name"] for s in listed(node, vmid)]
    if not snapshots:
        raise ProxmoxError(f"GET /{node.path(vmid, 'snapshot')}", f"container {vmid} has no snapshot to roll back to")
    target = name or snapshots[-1]
    if target not in snapshots:
        raise ProxmoxError(
            f"GET /{node.path(vmid, 'snapshot')}",
            f"container {vmid} has no snapshot {target!r} (it has: {', '.join(snapshots)})",
        )
    newer = snapshots[snapshots.index(target) + 1 :]
    try:
        node.api.run_task("POST", node.path(vmid, "snapshot", target, "rollback"), start=True)
    except ProxmoxError as error:
        if "is not most recent snapshot" not in str(error):
            raise
        raise ProxmoxError(
            error.call,
            f"{str(error).split(': ', 1)[1]}. On ZFS, Proxmox rolls back only to the most "
            f"recent snapshot, and {target} has newer ones: {', '.join(newer)}. Fix: roll "
            f"back to {newer[-1]}, or delete the newer snapshots first (pct delsnapshot "
            f"{vmid} NAME, newest first) and run again",
        ) from None
    finally:
        node.forget(vmid)
    return target
