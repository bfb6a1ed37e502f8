# ruff: noqa: F811  (pytest fixtures imported by name and used as parameters)
"""Snapshots before a change, on the in-process emulator: a storage that cannot snapshot is refused
at plan time with nothing written; old rollback points go only after the change succeeded; a retry
after a failed write reuses its snapshot; retention counts only the toolkit's own snapshots.

Which storages snapshot follows pve-storage (src/PVE/Storage/*Plugin.pm volume_has_feature) through
the emulator (lab/pve/storage.py SNAPSHOT_FEATURE), not the toolkit's table."""

import pytest

from lab.pve import requestlog
from sglang_pve.config import ConfigError
from sglang_pve.provision import snapshots
from sglang_pve.provision.container import plan

# the emulator fixtures (pve: PVE 8 and 9) and helpers of the provisioning tests, shared
from tests.unit.test_proxmox_provision import GPUS, converge, guest, node_of, pve, spec_of, writes  # noqa: F401

PUT_FAILS = {"method": "PUT", "path": "/nodes/*/lxc/*/config", "http_status": 500, "message": "got timeout"}


def add_storage(pve, sid: str, kind: str, tmp_path) -> None:
    """A storage for container volumes in the node's storage.cfg (what an operator adds)."""
    pve.node.storages.table[sid] = {"type": kind, "path": str(tmp_path / sid), "content": "rootdir,images"}


def ours(pve) -> list[str]:
    return [s["name"] for s in snapshots.listed(node_of(pve), 129) if s["name"].startswith(snapshots.PREFIX)]


def test_dir_storage_with_snapshots_kept_is_refused_before_the_create(pve, guest, tmp_path):
    add_storage(pve, "ctdir", "dir", tmp_path)
    spec = spec_of(pve, rootfs={"storage": "ctdir", "size_gb": 8}, snapshots_keep=2)
    with pytest.raises(ConfigError) as caught:
        plan(spec, node_of(pve), GPUS, guest)
    assert str(caught.value).splitlines()[1] == (
        "  - pve1: container.snapshots_keep = 2: container 129 cannot be snapshotted on node pve1 (rootfs on "
        "storage 'ctdir' (type dir)), so every change would fail at its snapshot. Fix: put the container's "
        "volumes on a snapshot-capable storage (btrfs, lvmthin, rbd, zfspool), or set snapshots_keep: 0 (no "
        "snapshot before a change, so no rollback point)"
    )
    assert writes(pve) == []
    assert requestlog.schema_violations(pve.requests()) == []
    on_dir = spec_of(pve, rootfs={"storage": "ctdir", "size_gb": 8}, snapshots_keep=0)
    assert converge(pve, node_of(pve), on_dir, guest).errors == []


def test_a_change_on_dir_storage_is_refused_by_the_feature_check_with_nothing_written(pve, guest, tmp_path):
    add_storage(pve, "ctdir", "dir", tmp_path)
    on_dir = {"rootfs": {"storage": "ctdir", "size_gb": 8}}
    assert converge(pve, node_of(pve), spec_of(pve, **on_dir, snapshots_keep=0), guest).errors == []
    # what PVE itself answers for this container (pve-guest-common AbstractConfig.pm __snapshot_prepare)
    ct = pve.client().nodes("pve1").lxc(129)
    assert ct.feature.get(feature="snapshot") == {"hasFeature": 0}
    assert pve.wait(ct.snapshot.post(snapname="probe"))["exitstatus"] == "snapshot feature is not available"
    start = len(pve.requests())
    with pytest.raises(ConfigError) as caught:
        plan(spec_of(pve, **on_dir, cores=96, snapshots_keep=2), node_of(pve), GPUS, guest)
    assert "container 129 cannot be snapshotted on node pve1 (rootfs on storage 'ctdir' (type dir))" in str(
        caught.value
    )
    assert [f"{e['method']} {e['path']}" for e in pve.requests()[start:] if e["method"] != "GET"] == [
        "POST /access/ticket"
    ]
    assert "cores: 64" in pve.conf_text(129)
    assert converge(pve, node_of(pve), spec_of(pve, **on_dir, cores=96, snapshots_keep=0), guest).errors == []


def test_an_operators_bind_mount_point_blocks_snapshots_and_is_named(pve, guest):
    assert converge(pve, node_of(pve), spec_of(pve), guest).errors == []
    node = node_of(pve)
    node.api.run_task("POST", "nodes/pve1/lxc/129/status/stop")  # stopped: the mount point applies at once
    node.api.request("PUT", "nodes/pve1/lxc/129/config", mp0="/srv/scratch,mp=/scratch")
    with pytest.raises(ConfigError) as caught:
        plan(spec_of(pve, cores=96), node_of(pve), GPUS, guest)
    assert "(mp0 is a bind mount (/srv/scratch))" in str(caught.value)


def test_snapshot_capable_storages_follow_pve_storage(pve, guest, tmp_path):
    """lvmthin and btrfs snapshot a container's volume, a dir storage's raw file cannot."""
    for vmid, (sid, kind, possible) in enumerate(
        [("thin", "lvmthin", 1), ("fs", "btrfs", 1), ("plain", "dir", 0), ("share", "nfs", 0)], start=170
    ):
        add_storage(pve, sid, kind, tmp_path)
        ct = pve.client().nodes("pve1")
        assert pve.wait(ct.lxc.post(vmid=vmid, ostemplate=pve.TEMPLATE, rootfs=f"{sid}:1"))["exitstatus"] == "OK"
        assert ct.lxc(vmid).feature.get(feature="snapshot") == {"hasFeature": possible}, kind


def test_two_failed_retries_keep_every_earlier_snapshot_and_take_no_duplicate(pve, guest):
    keep = {"snapshots_keep": 2}
    assert converge(pve, node_of(pve), spec_of(pve, **keep), guest).errors == []
    for cores in (70, 80):
        assert converge(pve, node_of(pve), spec_of(pve, cores=cores, **keep), guest).errors == []
    earlier = ours(pve)
    assert len(earlier) == 2

    pve.faults([PUT_FAILS])
    for _ in range(2):  # the PUT fails: two retries
        host = converge(pve, node_of(pve), spec_of(pve, cores=90, **keep), guest)
        assert host.errors and "got timeout" in host.errors[0]
    after_failures = ours(pve)
    assert after_failures[:2] == earlier and len(after_failures) == 3  # one new rollback point, reused
    assert "cores: 80" in pve.conf_text(129)

    pve.faults([])
    start = len(pve.requests())
    assert converge(pve, node_of(pve), spec_of(pve, cores=90, **keep), guest).errors == []
    assert [f"{e['method']} {e['path']}" for e in pve.requests()[start:] if e["method"] in ("POST", "DELETE")] == [
        "POST /access/ticket",  # a fresh node logs in
        f"DELETE /nodes/pve1/lxc/129/snapshot/{earlier[0]}",  # after the PUT succeeded, not before
    ]
    assert ours(pve) == after_failures[1:]
    assert "cores: 90" in pve.conf_text(129)
    assert requestlog.schema_violations(pve.requests()) == []


def test_retention_counts_only_the_toolkits_own_snapshots(pve, guest):
    keep = {"snapshots_keep": 1}
    assert converge(pve, node_of(pve), spec_of(pve, **keep), guest).errors == []
    ct = pve.client().nodes("pve1").lxc(129)
    assert pve.wait(ct.snapshot.post(snapname="before-upgrade"))["exitstatus"] == "OK"  # an operator's
    for cores in (70, 80):
        assert converge(pve, node_of(pve), spec_of(pve, cores=cores, **keep), guest).errors == []
    names = [s["name"] for s in snapshots.listed(node_of(pve), 129)]
    assert names[0] == "before-upgrade" and len(names) == 2 and names[1].startswith(snapshots.PREFIX)


def test_a_new_snapshot_when_the_config_moved_on_since_ours(pve, guest):
    """Ours is reused only while the config still is what it holds and points at it."""
    keep = {"snapshots_keep": 3}
    assert converge(pve, node_of(pve), spec_of(pve, **keep), guest).errors == []
    assert converge(pve, node_of(pve), spec_of(pve, cores=70, **keep), guest).errors == []
    assert converge(pve, node_of(pve), spec_of(pve, cores=80, **keep), guest).errors == []
    assert len(ours(pve)) == 2  # each change after the last one had its own point


def test_copied_leaves_out_what_a_snapshot_does_not_hold():
    config = {"cores": 4, "digest": "d", "parent": "p", "lock": "backup", "unused0": "x", "description": "t"}
    assert snapshots.copied(config) == {"cores": "4"}
    assert snapshots.copied({"onboot": True, "memory": 512}) == snapshots.copied({"onboot": "1", "memory": "512"})
