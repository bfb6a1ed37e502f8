"""Snapshots (pve-container src/PVE/API2/LXC/Snapshot.pm, pve-guest-common AbstractConfig.pm
snapshot_create / snapshot_rollback / snapshot_delete, commit 4a8f6cbf; pve-container
src/PVE/LXC/Config.pm __snapshot_*_vol_* and has_feature, commit 94f55852). A volume's snapshot on a
zfspool is a ZFS snapshot of its dataset (storage.py, zfs.py), so ZFS's rollback rule
(ZFSPoolPlugin.pm volume_rollback_is_possible) sees every snapshot of the dataset, whoever took it."""

import time

from . import conf as ctconf
from . import rules
from .api_common import ct_vmid, is_mountpoint, typed, volumes
from .api_status import start_work
from .errors import ApiError
from .node import Node, Request
from .routes import route

# AbstractConfig::__snapshot_copy_config leaves these out of a snapshot section
NOT_COPIED = {"snapstate", "snaptime", "vmstate", "lock", "digest", "description"}


def _copy(source: dict) -> dict:
    return {k: v for k, v in source.items() if k not in NOT_COPIED and not k.startswith("unused")}


def _reserved(snapname: str) -> None:
    if snapname == "current" or snapname.lower() == "pending":
        raise ApiError(f"unable to use snapshot name '{snapname}' (reserved name)")


@route("GET", "/nodes/{node}/lxc/{vmid}/snapshot")
def snapshot_list(node: Node, req: Request):
    """Snapshot.pm's list, field for field, except: PVE returns a description read back from
    its # lines with a trailing newline; this strips it, because a toolkit test on main expects
    the description as sent (to drop once that test accepts PVE's form)."""
    vmid = ct_vmid(node, req)
    text, config = node.read(vmid)
    res = []
    for name, snap in sorted(config.snapshots.items()):
        item = {
            "name": name,
            "snaptime": int(snap.get("snaptime") or 0),
            "description": (snap.get("description") or "").rstrip("\n"),
        }
        for key in ("parent", "snapstate"):
            if snap.get(key):
                item[key] = snap[key]
        res.append(item)
    current = {
        "name": "current",
        "digest": ctconf.digest(text),
        "running": int(node.running(vmid)),
        "description": "You are here!",
    }
    if "parent" in config.current:
        current["parent"] = config.current["parent"]
    return res + [current]


@route("POST", "/nodes/{node}/lxc/{vmid}/snapshot")
def snapshot_create(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    snapname = req.params["snapname"]
    _reserved(snapname)
    node.read(vmid)
    node.check_priv(req.ident, f"/vms/{vmid}", "VM.Snapshot")
    comment = req.params.get("description")

    def prepare(config):
        node.check_lock(config)
        if snapname in config.snapshots:
            raise ApiError(f"snapshot name '{snapname}' already used")
        if not snapshot_possible(node, config.current):
            raise ApiError("snapshot feature is not available")
        config.current["lock"] = "snapshot"
        for snap in config.snapshots.values():  # no bogus cycles
            if snap.get("parent") == snapname:
                del snap["parent"]
        snap = ctconf.Section(_copy(config.current))
        snap["snapstate"] = "prepare"
        snap["snaptime"] = str(int(time.time()))
        if comment:
            snap["description"] = comment
        config.snapshots[snapname] = snap

    def commit(config):
        del config.snapshots[snapname]["snapstate"]
        config.current.pop("lock", None)
        config.current["parent"] = snapname

    def cleanup(config):
        config.snapshots.pop(snapname, None)
        config.current.pop("lock", None)

    def work(log):
        node.update(vmid, prepare)
        taken = []
        try:
            node.backend.snapshot(vmid, snapname)
            for volume in volumes(node.read(vmid)[1].snapshots[snapname]):  # __snapshot_create_vol_snapshot
                node.storages.snapshot_volume(volume, snapname)
                taken.append(volume)
        except Exception:
            log.warn("snapshot create failed: starting cleanup")
            for volume in taken:
                node.storages.delete_volume_snapshot(volume, snapname)
            node.backend.delete_snapshot(vmid, snapname)
            node.update(vmid, cleanup)
            raise
        node.update(vmid, commit)

    return node.tasks.start("vzsnapshot", str(vmid), req.ident.user, work, req.task_error)


@route("POST", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback")
def snapshot_rollback(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    snapname = req.params["snapname"]
    _, config = node.read(vmid)
    node.check_priv(req.ident, f"/vms/{vmid}", "VM.Snapshot.Rollback")
    if snapname not in config.snapshots:
        raise ApiError(f"snapshot '{snapname}' does not exist")
    start = req.params.get("start") in ("1", True)

    def prepare(config):
        snap = config.snapshots.get(snapname)
        if snap is None:
            raise ApiError(f"snapshot '{snapname}' does not exist")
        for volume in volumes(snap):  # __snapshot_rollback_vol_possible: ZFS's rule, any snapshot's origin
            node.storages.rollback_is_possible(volume, snapname)
        if snap.get("snapstate"):
            raise ApiError(f"unable to rollback to incomplete snapshot (snapstate = {snap['snapstate']})")
        node.check_lock(config)
        config.current["lock"] = "rollback"

    def apply(config):
        snap = config.snapshots[snapname]
        keep = {k: v for k, v in config.current.items() if k == "description" or k.startswith("unused")}
        config.current.clear()
        config.current.update(keep)
        config.current.update(_copy(snap))
        config.current["parent"] = snapname
        config.pending.clear()

    def work(log):
        node.update(vmid, prepare)
        if node.running(vmid):
            log.log(f"stopping CT {vmid} for the rollback")
            node.backend.stop(vmid)
        try:
            node.backend.rollback(vmid, snapname)
        except Exception:
            node.set_lock(vmid, None)
            raise
        node.update(vmid, apply)
        if start:
            start_work(node, vmid, log)

    return node.tasks.start("vzrollback", str(vmid), req.ident.user, work, req.task_error)


@route("DELETE", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}")
def snapshot_delete(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    snapname = req.params["snapname"]
    node.read(vmid)
    node.check_priv(req.ident, f"/vms/{vmid}", "VM.Snapshot")
    force = req.params.get("force") in ("1", True)

    def prepare(config):
        if snapname not in config.snapshots:
            raise ApiError(f"snapshot '{snapname}' does not exist")
        if not force:
            node.check_lock(config)
        config.current["lock"] = "snapshot-delete"
        config.snapshots[snapname]["snapstate"] = "delete"

    def remove(config):
        snap = config.snapshots.pop(snapname)
        parent = snap.get("parent")
        for section in [config.current, *config.snapshots.values()]:
            if section.get("parent") == snapname:
                if parent:
                    section["parent"] = parent
                else:
                    del section["parent"]
        config.current.pop("lock", None)

    def work(log):
        node.update(vmid, prepare)
        try:
            node.backend.delete_snapshot(vmid, snapname)
            for volume in volumes(node.read(vmid)[1].snapshots[snapname]):  # __snapshot_delete_vol_snapshot
                node.storages.delete_volume_snapshot(volume, snapname)
        except Exception:
            if not force:
                node.set_lock(vmid, None)
                raise
            log.warn(f"volume snapshot of '{snapname}' not removed, dropped from the config")
        node.update(vmid, remove)

    return node.tasks.start("vzdelsnapshot", str(vmid), req.ident.user, work, req.task_error)


@route("GET", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config")
def snapshot_config_get(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    _, config = node.read(vmid)
    snap = config.snapshots.get(req.params["snapname"])
    if snap is None:
        raise ApiError(f"snapshot '{req.params['snapname']}' does not exist")
    return typed({k: v for k, v in snap.items() if k != "snapstate"}, req.info.get("returns", {}))


@route("PUT", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config")
def snapshot_config_put(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    snapname = req.params["snapname"]

    def change(config):
        if snapname not in config.snapshots:
            raise ApiError(f"snapshot '{snapname}' does not exist")
        if "description" in req.params:
            config.snapshots[snapname]["description"] = req.params["description"]

    node.update(vmid, change)
    return None


@route("GET", "/nodes/{node}/lxc/{vmid}/feature")
def feature(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    _, config = node.read(vmid)
    section = config.current
    if snapname := req.params.get("snapname"):
        if snapname not in config.snapshots:
            raise ApiError(f"snapshot '{snapname}' does not exist")
        section = config.snapshots[snapname]
    return {"hasFeature": int(snapshot_possible(node, section, snap=bool(snapname)))}


def snapshot_possible(node: Node, section: dict, snap: bool = False) -> bool:
    """pve-container src/PVE/LXC/Config.pm has_feature('snapshot'): every mount point (rootfs,
    mpN) a volume whose storage answers volume_has_feature (storage.py SNAPSHOT_FEATURE); a bind
    mount or device mount point never does. The API's vm_feature (src/PVE/API2/LXC.pm) asks it of
    the current config, or of a snapshot's (`snap`)."""
    return all(
        node.storages.can_snapshot(rules.mp_volume(v), snap=snap) for k, v in section.items() if is_mountpoint(k)
    )
