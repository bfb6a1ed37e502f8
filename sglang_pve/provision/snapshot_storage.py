"""Can this container be snapshotted? Known at plan time, so ``snapshots_keep > 0`` on a storage that
cannot is refused before any write (not at the first change, by the snapshot task).

Proxmox's rule (pve-container src/PVE/LXC/Config.pm has_feature, called by pve-guest-common
src/PVE/AbstractConfig.pm __snapshot_prepare, which dies "snapshot feature is not available"): every
mount point of the config (rootfs, mpN) must be a volume whose storage plugin answers
volume_has_feature('snapshot') for it; a bind mount or device path never does (pve-storage
src/PVE/Storage.pm volume_has_feature returns undef for a path). A container's volumes are raw or
subvol; per plugin (pve-storage src/PVE/Storage/*Plugin.pm volume_has_feature, commit 0c56bad8):
ZFSPoolPlugin, LvmThinPlugin, RBDPlugin: yes; BTRFSPlugin: raw and subvol; Plugin.pm (dir, nfs,
cifs, cephfs, glusterfs) and LVMPlugin: qcow2 only, so no; iSCSI: no.

An existing container: the API's own check (GET /nodes/{node}/lxc/{vmid}/feature?feature=snapshot,
pve-container src/PVE/API2/LXC.pm vm_feature). One not yet created: its rootfs storage's type
(GET /nodes/{node}/storage/{storage}/status, pve-storage src/PVE/API2/Storage/Status.pm read_status).
"""

import re

from sglang_pve.config.errors import Problem
from sglang_pve.config.proxmox import ContainerSpec
from sglang_pve.provision import propstring
from sglang_pve.provision.nodes import Node

SNAPSHOT_TYPES = ("btrfs", "lvmthin", "rbd", "zfspool")  # storage types that snapshot raw/subvol volumes
MOUNT_POINT = re.compile(r"^(rootfs|mp\d+)$")
FIX = (
    f"put the container's volumes on a snapshot-capable storage ({', '.join(SNAPSHOT_TYPES)}), or set "
    "snapshots_keep: 0 (no snapshot before a change, so no rollback point)"
)


def refusals(node: Node, spec: ContainerSpec, current: dict | None) -> list[Problem]:
    """A Problem when the toolkit would snapshot (snapshots_keep > 0) a container that cannot be;
    `current` is its config as read, None for a container still to be created."""
    if not spec.snapshots_keep:
        return []
    if current is None:
        kind = storage_type(node, spec.rootfs.storage)
        if kind in SNAPSHOT_TYPES:
            return []
        blockers = [f"rootfs on storage {spec.rootfs.storage!r} (type {kind})"]
    else:
        answer = node.api.get(node.path(spec.vmid, "feature"), feature="snapshot")
        if answer.get("hasFeature"):
            return []
        blockers = _blockers(node, current)
    return [
        Problem(
            "container.snapshots_keep",
            spec.snapshots_keep,
            f"container {spec.vmid} cannot be snapshotted on node {node.name} ({'; '.join(blockers)}), so "
            "every change would fail at its snapshot",
            FIX,
        )
    ]


def storage_type(node: Node, storage: str) -> str:
    return node.api.get(f"nodes/{node.name}/storage/{storage}/status")["type"]


def _blockers(node: Node, config: dict) -> list[str]:
    """Which mount points of `config` have no snapshots, for the message."""
    found = []
    for key, value in sorted(config.items()):
        if not MOUNT_POINT.match(key):
            continue
        volume = volume_of(value)
        if volume.startswith("/"):
            found.append(f"{key} is a {'device' if volume.startswith('/dev/') else 'bind'} mount ({volume})")
        elif (kind := storage_type(node, volume.split(":", 1)[0])) not in SNAPSHOT_TYPES:
            found.append(f"{key} on storage {volume.split(':', 1)[0]!r} (type {kind})")
    return found or ["the node's feature check says no"]


def volume_of(value: str) -> str:
    """The volume of a rootfs/mpN property string (its default key, pve-container
    src/PVE/LXC/Config.pm $rootfs_desc: default_key "volume")."""
    return propstring.parse(value, default_key="volume").get("volume", "")


def zfs_datasets(node: Node, vmid: int, snapshot: str) -> list[tuple[str, str]]:
    """(volume, dataset) of each volume of `snapshot` on a zfspool storage: ``<pool>/<vname>`` as
    ZFSPoolPlugin.pm builds it (parse_volname: the last part of the volume name), the pool from the
    storage's configuration (GET /storage/{storage})."""
    config = node.api.get(node.path(vmid, "snapshot", snapshot, "config"))
    storages: dict[str, dict] = {}
    found = []
    for key, value in sorted(config.items()):
        volume = volume_of(str(value)) if MOUNT_POINT.match(key) else ""
        if not volume or volume.startswith("/"):
            continue
        sid, _, name = volume.partition(":")
        if sid not in storages:
            storages[sid] = node.api.get(f"storage/{sid}")
        if storages[sid].get("type") == "zfspool":
            found.append((volume, f"{storages[sid]['pool']}/{name.rsplit('/', 1)[-1]}"))
    return found
