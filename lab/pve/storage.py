"""The node's storage table (what /etc/pve/storage.cfg would hold) and what pve-storage answers
about it: content listings, volume names, which volumes can be snapshotted.

Default, as a fresh PVE install with ZFS and LVM-thin both present would have:
``local`` (dir /var/lib/vz: vztmpl, iso, backup), ``local-lvm`` (lvmthin: rootdir, images),
``local-zfs`` (zfspool: rootdir, images). A JSON file (``--storage``) replaces the table, e.g.
``{"local": {"type": "dir", "path": "/var/lib/vz", "content": "vztmpl,iso,backup"}}``.
Templates are the files in ``<path>/template/cache/`` of a dir storage, as `pveam` leaves them.
"""

import json
import os
import re

DEFAULT_STORAGES = {
    "local": {"type": "dir", "path": "/var/lib/vz", "content": "vztmpl,iso,backup"},
    "local-lvm": {"type": "lvmthin", "content": "rootdir,images", "vgname": "pve", "thinpool": "data"},
    "local-zfs": {"type": "zfspool", "content": "rootdir,images", "pool": "rpool/data", "sparse": 1},
}
SNAPSHOT_TYPES = {"lvmthin", "zfspool", "rbd", "btrfs"}  # volume_has_feature('snapshot')
TEMPLATE_SUFFIXES = {".tar.gz": "tgz", ".tar.xz": "txz", ".tar.zst": "tzst", ".tgz": "tgz", ".tar.bz2": "tbz2"}


class Storages:
    def __init__(self, table: dict | None = None):
        self.table = {sid: dict(s) for sid, s in (table or DEFAULT_STORAGES).items()}

    @classmethod
    def from_file(cls, path) -> "Storages":
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

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
        """The volume id pve-storage's alloc_image names for a container's disk ``index``."""
        kind = self.table[sid]["type"]
        if kind == "zfspool":
            return f"{sid}:subvol-{vmid}-disk-{index}"
        if kind == "dir":
            return f"{sid}:{vmid}/vm-{vmid}-disk-{index}.raw"
        return f"{sid}:vm-{vmid}-disk-{index}"

    def volume_storage(self, volid: str) -> dict | None:
        """The storage of a volume id, or None for a path (a bind mount or device)."""
        m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):", volid, re.I)
        return self.table.get(m[1]) if m else None

    def can_snapshot(self, volid: str) -> bool:
        s = self.volume_storage(volid)
        return bool(s) and s["type"] in SNAPSHOT_TYPES
