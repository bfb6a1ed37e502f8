"""Snapshots of a container: one before every change, named with time and reason, the toolkit's
own kept to a count; rollback to the newest (or a named) one, with ZFS's rule said plainly."""

import re
import time

from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.nodes import Node

PREFIX = "sgpve-"  # the toolkit's own snapshots (retention never touches another)


def take(node: Node, vmid: int, reason: str, detail: str) -> str:
    """The rollback point before a change: a new snapshot ``sgpve-YYYYmmdd-HHMMSS-<reason>`` (its
    description gives the detail), or the newest of ours when it still is that point (a retry after a
    failed change: it is the config's parent and holds the same settings). Deletes nothing: the
    oldest go in `prune`, once the change succeeded."""
    existing = listed(node, vmid)
    names = [s["name"] for s in existing]
    ours = [name for name in names if name.startswith(PREFIX)]
    current = node.config(vmid)
    if ours and current.get("parent") == ours[-1] == names[-1]:
        if copied(node.api.get(node.path(vmid, "snapshot", ours[-1], "config"))) == copied(current):
            return ours[-1]
    name = base = f"{PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{reason}"
    for n in range(2, 100):
        if name not in names:
            break
        name = f"{base}-{n}"
    node.api.run_task("POST", node.path(vmid, "snapshot"), snapname=name, description=f"sglang-pve: {detail}"[:200])
    return name


def prune(node: Node, vmid: int, keep: int) -> list[str]:
    """After a change succeeded: delete the oldest of the toolkit's own snapshots beyond `keep`
    (never another's); the names deleted."""
    ours = [s["name"] for s in listed(node, vmid) if s["name"].startswith(PREFIX)]
    doomed = ours[:-keep] if keep else ours
    for old in doomed:
        node.api.run_task("DELETE", node.path(vmid, "snapshot", old))
    return doomed


# pve-guest-common src/PVE/AbstractConfig.pm __snapshot_copy_config: what a snapshot leaves out;
# "parent" too here (the snapshot keeps the parent it had, the config points at the snapshot)
NOT_COPIED = {"snapstate", "snaptime", "vmstate", "lock", "digest", "description", "parent"}


def copied(config: dict) -> dict:
    """A config as a snapshot of it holds it, values as text (GET .../config types them by the
    schema, GET .../snapshot/{name}/config returns an untyped object), to tell whether they are equal."""
    return {
        k: str(int(v) if isinstance(v, bool) else v)
        for k, v in config.items()
        if k not in NOT_COPIED and not re.match(r"^unused\d+$", k)
    }


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
        raise ProxmoxError(error.call, f"{error.message}. {zfs_rule(vmid, target, newer, [])}") from None
    finally:
        node.forget(vmid)
    return target


def zfs_rule(vmid: int, target: str, newer: list[str], foreign: list[str]) -> str:
    """Why ZFS refuses the rollback and what to do: `newer` are the container's Proxmox snapshots
    after `target`, `foreign` the "dataset@name" of newer ZFS snapshots Proxmox did not take
    (sanoid, zfs-auto-snapshot, an operator's `zfs snapshot`), when known."""
    delete = f"delete the newer Proxmox snapshots (pct delsnapshot {vmid} NAME, newest first)"
    if not foreign and newer:
        return (
            "On ZFS, Proxmox rolls back only to the most recent snapshot, and "
            f"{target} has newer ones: {', '.join(newer)}. Fix: roll back to {newer[-1]}, or {delete} and run again"
        )
    if not foreign:
        return (
            f"On ZFS, Proxmox rolls back only to the most recent snapshot, and {target} has newer ZFS snapshots "
            "that Proxmox did not take (sanoid, zfs-auto-snapshot, an operator's): `zfs list -t snapshot -o name "
            "-s creation` on the node names them. Fix: destroy them (zfs destroy DATASET@NAME) after pausing "
            "whatever takes them, and run again"
        )
    return (
        f"On ZFS, Proxmox rolls back only to the most recent snapshot, and {target} has newer ones: "
        f"{', '.join(newer + foreign)} ({len(foreign)} not taken by Proxmox: sanoid, zfs-auto-snapshot or an "
        f"operator's). Fix: destroy those ({'; '.join(f'zfs destroy {f}' for f in foreign)}) after pausing "
        f"whatever takes them{', ' + delete if newer else ''}, and run again"
    )
