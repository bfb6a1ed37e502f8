"""The node's storage table (what /etc/pve/storage.cfg would hold) and what pve-storage answers
about it: content listings, volume names, which volumes can be snapshotted.

Default, as a fresh PVE install with ZFS and LVM-thin both present would have:
``local`` (dir /var/lib/vz: vztmpl, iso, backup), ``local-lvm`` (lvmthin: rootdir, images),
``local-zfs`` (zfspool: rootdir, images). A JSON file (``--storage``) replaces the table, e.g.
``{"local": {"type": "dir", "path": "/var/lib/vz", "content": "vztmpl,iso,backup"}}``.
Templates are the files in ``<path>/template/cache/`` of a dir storage, as `pveam` leaves them.
"""

import hashlib
import json
import os
import re

from .zfs import Zfs, ZfsError

DEFAULT_STORAGES = {
    "local": {"type": "dir", "path": "/var/lib/vz", "content": "vztmpl,iso,backup"},
    "local-lvm": {"type": "lvmthin", "content": "rootdir,images", "vgname": "pve", "thinpool": "data"},
    "local-zfs": {"type": "zfspool", "content": "rootdir,images", "pool": "rpool/data", "sparse": 1},
}
# volume_has_feature($feature = 'snapshot') per plugin (pve-storage src/PVE/Storage/*Plugin.pm, commit
# 0c56bad8): {type: {"current" | "snap": formats}}, "*" for any format; a type not here has none
# (Plugin.pm, inherited by DirPlugin/NFS/CIFS/CephFS: qcow2 only, which no container volume is).
SNAPSHOT_FEATURE = {
    "zfspool": {"current": "*", "snap": "*"},  # ZFSPoolPlugin.pm
    "rbd": {"current": "*", "snap": "*"},  # RBDPlugin.pm
    "lvmthin": {"current": "*"},  # LvmThinPlugin.pm: not of a snapshot
    "btrfs": {"current": {"raw", "subvol", "qcow2"}, "snap": {"raw", "subvol", "qcow2"}},  # BTRFSPlugin.pm
    "dir": {"current": {"qcow2"}, "snap": {"qcow2"}},  # Plugin.pm
    "lvm": {"current": {"qcow2"}, "snap": {"qcow2"}},  # LVMPlugin.pm
}
TEMPLATE_SUFFIXES = {".tar.gz": "tgz", ".tar.xz": "txz", ".tar.zst": "tzst", ".tgz": "tgz", ".tar.bz2": "tbz2"}


class StorageError(Exception):
    """A storage operation that failed, with pve-storage's message."""


def _zfs(action, *args):
    """A zfs_request: run_command's errmsg "zfs error" before what zfs printed."""
    try:
        return action(*args)
    except ZfsError as error:
        raise StorageError(f"zfs error: {error}") from None


class Storages:
    """``zfs_state``: where the zfspool datasets' snapshots are kept (zfs.py; shared with the node's
    `zfs` command)."""

    def __init__(self, table: dict | None = None, zfs_state=None):
        self.table = {sid: dict(s) for sid, s in (table or DEFAULT_STORAGES).items()}
        self.zfs = Zfs(zfs_state)

    @classmethod
    def from_file(cls, path, zfs_state=None) -> "Storages":
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f), zfs_state)

    def get(self, sid: str) -> dict | None:
        return self.table.get(sid)

    def content(self, sid: str) -> set[str]:
        return set(filter(None, self.table[sid].get("content", "").split(",")))

    def listing(self) -> list[dict]:
        """GET /nodes/{node}/storage."""
        return [
            {
                "storage": sid,
                "type": s["type"],
                "content": s.get("content", ""),
                "active": 1,
                "enabled": 1,
                "shared": 0,
                "total": 1 << 40,
                "used": 1 << 30,
                "avail": (1 << 40) - (1 << 30),
            }
            for sid, s in sorted(self.table.items())
        ]

    def templates(self, sid: str) -> list[dict]:
        """The vztmpl volumes of a dir storage (GET .../content?content=vztmpl)."""
        s = self.table[sid]
        if s["type"] != "dir" or "vztmpl" not in self.content(sid):
            return []
        cache = os.path.join(s["path"], "template", "cache")
        res = []
        for name in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
            fmt = next((f for suf, f in TEMPLATE_SUFFIXES.items() if name.endswith(suf)), None)
            if fmt:
                st = os.stat(os.path.join(cache, name))
                res.append(
                    {
                        "volid": f"{sid}:vztmpl/{name}",
                        "content": "vztmpl",
                        "format": fmt,
                        "size": st.st_size,
                        "ctime": int(st.st_mtime),
                    }
                )
        return res

    def template_exists(self, volid: str) -> bool:
        sid, _, name = volid.partition(":")
        return any(t["volid"] == volid for t in self.templates(sid)) if sid in self.table else False

    def new_volume(self, sid: str, vmid: int, index: int) -> str:
        """The volume id pve-storage's alloc_image names for a container's disk ``index``; on a
        zfspool, its dataset created (ZFSPoolPlugin.pm alloc_image: zfs create)."""
        kind = self.table[sid]["type"]
        if kind == "zfspool":
            volid = f"{sid}:subvol-{vmid}-disk-{index}"
            self.zfs.create(self.dataset(volid))
            return volid
        if kind == "dir":
            return f"{sid}:{vmid}/vm-{vmid}-disk-{index}.raw"
        return f"{sid}:vm-{vmid}-disk-{index}"

    def volume_storage(self, volid: str) -> dict | None:
        """The storage of a volume id, or None for a path (a bind mount or device)."""
        m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):", volid, re.I)
        return self.table.get(m[1]) if m else None

    def can_snapshot(self, volid: str, snap: bool = False) -> bool:
        """PVE::Storage::volume_has_feature($cfg, 'snapshot', $volid, $snapname): undef for a path
        (a bind or device mount point); of the current volume, or (`snap`) of a snapshot of it."""
        s = self.volume_storage(volid)
        if not s:
            return False
        formats = SNAPSHOT_FEATURE.get(s["type"], {}).get("snap" if snap else "current", ())
        return formats == "*" or volume_format(volid) in formats

    def status(self, sid: str) -> dict | None:
        """GET /nodes/{node}/storage/{storage}/status (pve-storage src/PVE/Storage.pm storage_info,
        as API2/Storage/Status.pm read_status returns one entry)."""
        return next((s for s in self.listing() if s["storage"] == sid), None)

    def config(self, sid: str) -> dict | None:
        """GET /storage/{storage} (pve-storage src/PVE/API2/Storage/Config.pm $api_storage_config:
        the section with its id and the file's digest)."""
        if sid not in self.table:
            return None
        digest = hashlib.sha1(json.dumps(self.table, sort_keys=True).encode()).hexdigest()
        return {**self.table[sid], "storage": sid, "digest": digest}

    def dataset(self, volid: str) -> str | None:
        """``<pool>/<vname>`` of a zfspool volume (parse_volname: the name after an optional
        base-.../ part), None for any other volume or a path."""
        s = self.volume_storage(volid)
        if not s or s["type"] != "zfspool":
            return None
        vname = volid.partition(":")[2].rsplit("/", 1)[-1]
        return f"{s.get('pool', 'rpool/data')}/{vname}"

    def snapshot_volume(self, volid: str, snap: str) -> None:
        if ds := self.dataset(volid):
            _zfs(self.zfs.snapshot, ds, snap)

    def delete_volume_snapshot(self, volid: str, snap: str) -> None:
        if ds := self.dataset(volid):
            _zfs(self.zfs.destroy_snapshot, ds, snap)

    def free_volume(self, volid: str) -> None:
        if ds := self.dataset(volid):
            self.zfs.destroy(ds)

    def rollback_is_possible(self, volid: str, snap: str) -> None:
        """ZFSPoolPlugin.pm volume_rollback_is_possible: every snapshot of the dataset newer than
        `snap` blocks, whoever took it; the messages are PVE's."""
        ds = self.dataset(volid)
        if not ds:
            return
        names = _zfs(self.zfs.snapshots, ds)
        if snap not in names:
            raise StorageError(f"can't rollback, snapshot '{snap}' does not exist on '{volid}'")
        if names[names.index(snap) + 1 :]:
            raise StorageError(f"can't rollback, '{snap}' is not most recent snapshot on '{volid}'")


def volume_format(volid: str) -> str:
    """The format parse_volname gives: "subvol" for subvol-/basevol- volumes, else the file suffix
    (a dir storage's vm-101-disk-0.raw), raw for a block volume (vm-101-disk-0 on LVM, ZFS, RBD)."""
    name = volid.partition(":")[2].rsplit("/", 1)[-1]
    if name.startswith(("subvol-", "basevol-")):
        return "subvol"
    suffix = name.rsplit(".", 1)[1] if "." in name else ""
    return suffix if suffix in ("raw", "qcow2", "vmdk", "subvol") else "raw"
