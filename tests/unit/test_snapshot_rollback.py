# ruff: noqa: F811  (pytest fixtures imported by name and used as parameters)
"""A snapshot rollback on ZFS, where any newer snapshot of the dataset blocks it, whoever took it
(pve-storage ZFSPoolPlugin.pm volume_rollback_is_possible, 0c56bad8): the operation names every
blocking snapshot, a "sanoid" one planted with the node's `zfs` (lab/pve/zfs.py) included, and
refuses before any write; the callback never fails on an empty list of newer Proxmox snapshots."""

import subprocess

import pytest
from pyinfra.api import OperationError

from sglang_pve.provision import snapshot_rollback, snapshots
from sglang_pve.provision.client import ProxmoxError

# the emulator fixtures (pve: PVE 8 and 9) and helpers of the provisioning tests, shared
from tests.unit.test_proxmox_provision import (  # noqa: F401
    NodeHost,
    converge,
    execute,
    guest,
    node_of,
    operation,
    pve,
    spec_of,
    writes,
)

DATASET = "rpool/data/subvol-129-disk-0"
SANOID = f"{DATASET}@autosnap_2026-12-01_15:00:00_hourly"


def rollback_op(pve, **kwargs) -> list:
    """The operation prepared on the node (its ZFS snapshots listed there)."""
    return operation(
        snapshot_rollback.rolled_back, NodeHost(), spec=spec_of(pve), node=node_of(pve), on_node=NodeHost(), **kwargs
    )


def zfs(*argv: str) -> None:
    """The node's `zfs`, as sanoid or an operator runs it (on PATH: the pve fixture)."""
    subprocess.run(["zfs", *argv], check=True)


def with_snapshots(pve, guest, count: int) -> list[str]:
    keep = {"snapshots_keep": 5}
    assert converge(pve, node_of(pve), spec_of(pve, **keep), guest).errors == []
    for cores in range(70, 70 + count):
        assert converge(pve, node_of(pve), spec_of(pve, cores=cores, **keep), guest).errors == []
    return [s["name"] for s in snapshots.listed(node_of(pve), 129)]


def test_a_newer_sanoid_snapshot_is_named_and_nothing_is_written(pve, guest):
    [newest] = with_snapshots(pve, guest, 1)
    zfs("snapshot", SANOID)
    start = len(writes(pve))
    with pytest.raises(OperationError) as caught:
        rollback_op(pve)
    assert str(caught.value) == (
        f"pve1: container 129 cannot be rolled back to {newest}: On ZFS, Proxmox rolls back only to the most "
        f"recent snapshot, and {newest} has newer ones: {SANOID} (1 not taken by Proxmox: sanoid, "
        f"zfs-auto-snapshot or an operator's). Fix: destroy those (zfs destroy {SANOID}) after pausing whatever "
        "takes them, and run again"
    )
    assert len(writes(pve)) == start
    zfs("destroy", SANOID)  # the fix
    commands = rollback_op(pve)
    assert execute(NodeHost(), commands) == [True] and "cores: 64" in pve.conf_text(129)  # as before the change


def test_proxmox_and_foreign_blockers_are_named_together(pve, guest):
    names = with_snapshots(pve, guest, 2)
    zfs("snapshot", SANOID)
    with pytest.raises(OperationError) as caught:
        rollback_op(pve, snapshot=names[0])
    assert f"has newer ones: {names[1]}, {SANOID} (1 not taken by Proxmox" in str(caught.value)
    assert str(caught.value).endswith(
        f"Fix: destroy those (zfs destroy {SANOID}) after pausing whatever takes them, delete the newer Proxmox "
        "snapshots (pct delsnapshot 129 NAME, newest first), and run again"
    )


def test_the_callback_names_foreign_blockers_it_cannot_list_without_an_index_error(pve, guest):
    """Proxmox refuses with no newer Proxmox snapshot: the old code took newer[-1] of an empty list."""
    [newest] = with_snapshots(pve, guest, 1)
    zfs("snapshot", SANOID)  # between the plan and the rollback
    with pytest.raises(ProxmoxError) as caught:
        snapshots.rollback(node_of(pve), 129, newest)
    message = str(caught.value)
    assert f"can't rollback, '{newest}' is not most recent snapshot on 'local-zfs:subvol-129-disk-0'" in message
    assert "has newer ZFS snapshots that Proxmox did not take (sanoid, zfs-auto-snapshot, an operator's)" in message
    assert message.endswith(
        "Fix: destroy them (zfs destroy DATASET@NAME) after pausing whatever takes them, and run again"
    )


def test_a_snapshot_missing_on_the_dataset_is_refused(pve, guest):
    [newest] = with_snapshots(pve, guest, 1)
    zfs("destroy", f"{DATASET}@{newest}")  # someone destroyed it behind Proxmox's back
    with pytest.raises(OperationError) as caught:
        rollback_op(pve)
    assert str(caught.value) == (
        f"pve1: container 129 cannot be rolled back to {newest}: local-zfs:subvol-129-disk-0 has no ZFS snapshot "
        f"{newest} ({DATASET}@{newest}): Proxmox cannot roll it back"
    )
