"""ZFS facts of a Proxmox node: the snapshots of a dataset, whoever took them.

Proxmox lists only its own snapshots (the container config's sections), but ZFS rolls back only to
a dataset's newest snapshot, and sanoid, zfs-auto-snapshot or an operator take snapshots of the
same datasets: pve-storage decides a rollback from this very listing (src/PVE/Storage/
ZFSPoolPlugin.pm zfs_get_sorted_snapshot_list, volume_rollback_is_possible, commit 0c56bad8).
"""

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

_FAILED = "--- sglang-pve: zfs list failed"


@dataclass(frozen=True)
class ZfsListing:
    snapshots: list[str]  # "<dataset>@<name>", oldest first (-s creation)
    error: str | None = None  # what zfs printed when it could not list (no such dataset, no zfs)

    @property
    def names(self) -> list[str]:
        """The snapshot names, as pve-storage strips them (s/^.*@//)."""
        return [line.split("@", 1)[1] for line in self.snapshots]


class ZfsSnapshots(FactBase[ZfsListing]):
    """The snapshots of a dataset and its children, oldest first, as pve-storage lists them.

    host.get_fact(ZfsSnapshots, dataset="rpool/data/subvol-129-disk-0")
    # ZfsListing(snapshots=["rpool/data/subvol-129-disk-0@sgpve-20261201-101500-config",
    #                       "rpool/data/subvol-129-disk-0@autosnap_2026-12-01_11:00:00_hourly"], error=None)
    """

    def command(self, dataset):
        return f"zfs list -H -r -t snapshot -o name -s creation {shlex.quote(dataset)} 2>&1 || echo '{_FAILED}'; true"

    def process(self, output):
        if output and output[-1] == _FAILED:
            return ZfsListing([], " ".join(output[:-1]).strip() or "zfs list failed")
        return ZfsListing([line for line in output if "@" in line])
