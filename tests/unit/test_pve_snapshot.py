"""Snapshots: refused with a bind mount point, ZFS rolls back only to the most recent one,
a rollback restores the config and the root filesystem (DirBackend's volume)."""

import pytest

from lab.pve.testing import EmulatedNode


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:
        yield node


def create(pve, vmid, **extra):
    upid = (
        pve.client()
        .nodes("pve1")
        .lxc.post(vmid=vmid, ostemplate=pve.TEMPLATE, hostname=f"ct{vmid}", unprivileged=1, **extra)
    )
    assert pve.wait(upid)["exitstatus"] == "OK"
    return pve.client().nodes("pve1").lxc(vmid)


def snapshot(pve, ct, name):
    return pve.wait(ct.snapshot.post(snapname=name))["exitstatus"]


def test_bind_mount_point_blocks_snapshots(pve):
    ct = create(pve, 160, rootfs="local-zfs:4", mp0="/srv/models,mp=/shared")
    assert ct.feature.get(feature="snapshot") == {"hasFeature": 0}
    assert snapshot(pve, ct, "pre") == "snapshot feature is not available"
    assert "[pre]" not in pve.conf_text(160) and "lock:" not in pve.conf_text(160)
    ct.config.put(delete="mp0")
    assert ct.feature.get(feature="snapshot") == {"hasFeature": 1}
    assert snapshot(pve, ct, "pre") == "OK"


def test_zfs_rolls_back_only_to_the_most_recent(pve):
    ct = create(pve, 161, rootfs="local-zfs:4", cores=1)
    rootfs = pve.backend.volume_dir("local-zfs:subvol-161-disk-0")
    assert snapshot(pve, ct, "one") == "OK"
    ct.config.put(cores=2)
    (rootfs / "etc-changed").write_text("2")
    assert snapshot(pve, ct, "two") == "OK"
    ct.config.put(cores=3)
    (rootfs / "etc-changed").write_text("3")
    status = pve.wait(ct.snapshot("one").rollback.post())
    assert status["exitstatus"] == "can't rollback, 'one' is not most recent snapshot"
    assert pve.wait(ct.snapshot("two").rollback.post(start=1))["exitstatus"] == "OK"
    cfg = ct.config.get()
    assert (cfg["cores"], cfg["parent"]) == (2, "two")
    assert (rootfs / "etc-changed").read_text() == "2"
    assert ct.status.current.get()["status"] == "running"
    names = [(s["name"], s.get("parent")) for s in ct.snapshot.get()]
    assert names == [("one", None), ("two", "one"), ("current", "two")]


def test_lvmthin_rolls_back_to_any_and_delete_relinks_parents(pve):
    ct = create(pve, 162, rootfs="local-lvm:4", cores=1)
    for n, name in enumerate(["sa", "sb", "sc"], start=1):
        ct.config.put(cores=n)
        assert snapshot(pve, ct, name) == "OK"
    assert pve.wait(ct.snapshot("sa").rollback.post())["exitstatus"] == "OK"
    assert ct.config.get()["cores"] == 1
    assert pve.wait(ct.snapshot("sb").delete())["exitstatus"] == "OK"
    assert [(s["name"], s.get("parent")) for s in ct.snapshot.get()] == [("sa", None), ("sc", "sa"), ("current", "sa")]
