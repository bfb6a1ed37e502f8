"""The ZFS datasets behind the node's zfspool storages, as far as their snapshots go: which
snapshots each has, in creation order, whoever took them (Proxmox through the emulator, or sanoid,
zfs-auto-snapshot, an operator through the node's `zfs` command). One JSON file on the node, under
a lock: the emulator (pve-storage's side) and the `zfs` command (this module's `main`, installed in
pve1 as /usr/sbin/zfs) share it.

What it follows:
- pve-storage src/PVE/Storage/ZFSPoolPlugin.pm (commit 0c56bad8): alloc_image creates
  ``<pool>/<vname>``, volume_snapshot runs ``zfs snapshot <pool>/<vname>@<snap>``,
  volume_snapshot_delete ``zfs destroy``, free_image ``zfs destroy -r``; volume_rollback_is_possible
  lists ``zfs list -H -r -t snapshot -o name -s creation <pool>/<vname>`` (zfs_get_sorted_snapshot_list)
  and refuses when any snapshot of the dataset, of any origin, is newer than the target.
- OpenZFS's messages (openzfs/zfs lib/libzfs/libzfs_util.c zfs_standard_error_fmt, commit 013e3d39):
  ENOENT "dataset does not exist", EEXIST "dataset already exists", printed "<action>: <why>".

    zfs list -H -r -t snapshot -o name -s creation rpool/data/subvol-129-disk-0
    zfs snapshot rpool/data/subvol-129-disk-0@autosnap_2026-12-01_15:00:00_hourly   # what sanoid runs
    zfs destroy rpool/data/subvol-129-disk-0@autosnap_2026-12-01_15:00:00_hourly
"""

import argparse
import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

STATE_ENV = "PVE_LAB_ZFS_STATE"
DEFAULT_STATE = "/var/lib/pve-lab/zfs.json"


class ZfsError(Exception):
    """What `zfs` prints on stderr before it exits 1."""


def state_path() -> Path:
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE)


class Zfs:
    """``{"datasets": {name: [[snapshot, creation time], ...]}}``, snapshots oldest first."""

    def __init__(self, path=None):
        self.path = Path(path) if path else state_path()

    @contextmanager
    def _state(self, write: bool):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            try:
                state = json.loads(self.path.read_text())
            except FileNotFoundError:
                state = {"datasets": {}}
            yield state["datasets"]
            if write:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state, sort_keys=True))
                tmp.replace(self.path)

    def create(self, dataset: str) -> None:
        with self._state(True) as datasets:
            if dataset in datasets:
                raise ZfsError(f"cannot create '{dataset}': dataset already exists")
            datasets[dataset] = []

    def destroy(self, dataset: str) -> None:
        """``zfs destroy -r``: the dataset and every snapshot of it."""
        with self._state(True) as datasets:
            datasets.pop(dataset, None)

    def snapshot(self, dataset: str, name: str) -> None:
        with self._state(True) as datasets:
            if dataset not in datasets:
                raise ZfsError(f"cannot open '{dataset}': dataset does not exist")
            if name in (s for s, _ in datasets[dataset]):
                raise ZfsError(f"cannot create snapshot '{dataset}@{name}': dataset already exists")
            datasets[dataset].append([name, int(time.time())])

    def destroy_snapshot(self, dataset: str, name: str) -> None:
        with self._state(True) as datasets:
            kept = [s for s in datasets.get(dataset, []) if s[0] != name]
            if dataset not in datasets or len(kept) == len(datasets[dataset]):
                raise ZfsError("could not find any snapshots to destroy; check snapshot names.")
            datasets[dataset] = kept

    def snapshots(self, dataset: str) -> list[str]:
        """Oldest first (``-s creation``; of equal seconds, in the order they were taken)."""
        with self._state(False) as datasets:
            if dataset not in datasets:
                raise ZfsError(f"cannot open '{dataset}': dataset does not exist")
            return [name for name, _ in datasets[dataset]]

    def exists(self, dataset: str) -> bool:
        with self._state(False) as datasets:
            return dataset in datasets


def main(argv=None) -> int:
    """The node's `zfs`: list (snapshots of one dataset, as PVE and sanoid call it), snapshot, destroy."""
    p = argparse.ArgumentParser(prog="zfs")
    sub = p.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list")
    listing.add_argument("-H", action="store_true")
    listing.add_argument("-r", action="store_true")
    listing.add_argument("-t", choices=["snapshot"], required=True)
    listing.add_argument("-o", choices=["name"], default="name")
    listing.add_argument("-s", choices=["creation"], default="creation")
    listing.add_argument("dataset")
    take = sub.add_parser("snapshot")
    take.add_argument("snapshot")
    drop = sub.add_parser("destroy")
    drop.add_argument("snapshot")
    args = p.parse_args(argv)
    zfs = Zfs()
    try:
        if args.command == "list":
            lines = [f"{args.dataset}@{name}" for name in zfs.snapshots(args.dataset)]
            if lines or not args.H:
                print("\n".join(([] if args.H else ["NAME"]) + lines))
        else:
            dataset, at, name = args.snapshot.partition("@")
            if not at or not name:
                raise ZfsError(f"cannot {args.command} '{args.snapshot}': not a snapshot (DATASET@NAME)")
            (zfs.snapshot if args.command == "snapshot" else zfs.destroy_snapshot)(dataset, name)
    except ZfsError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
