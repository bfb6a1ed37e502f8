"""Snapshots: refused with a bind mount point, ZFS rolls back only to the most recent one (of any
origin: a snapshot sanoid took with the node's `zfs` blocks it too), a rollback restores the config
and the root filesystem (DirBackend's volume). Cases from pve-storage ZFSPoolPlugin.pm
(volume_snapshot, volume_snapshot_delete, free_image, volume_rollback_is_possible, commit 0c56bad8)."""

import pytest

from lab.pve import zfs
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
    # pve-storage ZFSPoolPlugin.pm volume_rollback_is_possible (0c56bad8), word for word
    assert status["exitstatus"] == "can't rollback, 'one' is not most recent snapshot on 'local-zfs:subvol-161-disk-0'"
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


def zfs_command(pve, monkeypatch, capsys, *argv) -> tuple[int, str, str]:
    """The node's `zfs` (lab/pve/zfs.py main) on this emulator's datasets."""
    monkeypatch.setenv(zfs.STATE_ENV, str(pve.zfs_state))
    code = zfs.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_snapshot_is_a_zfs_snapshot_of_the_dataset_and_goes_with_it(pve, monkeypatch, capsys):
    ct = create(pve, 163, rootfs="local-zfs:4")
    dataset = "rpool/data/subvol-163-disk-0"
    listing = ("list", "-H", "-r", "-t", "snapshot", "-o", "name", "-s", "creation", dataset)
    assert zfs_command(pve, monkeypatch, capsys, *listing) == (0, "", "")
    assert snapshot(pve, ct, "first") == "OK" and snapshot(pve, ct, "second") == "OK"
    assert zfs_command(pve, monkeypatch, capsys, *listing)[1] == f"{dataset}@first\n{dataset}@second\n"
    assert pve.wait(ct.snapshot("first").delete())["exitstatus"] == "OK"
    assert zfs_command(pve, monkeypatch, capsys, *listing)[1] == f"{dataset}@second\n"
    assert pve.wait(ct.delete())["exitstatus"] == "OK"  # free_image: zfs destroy -r
    assert zfs_command(pve, monkeypatch, capsys, *listing) == (
        1,
        "",
        f"cannot open '{dataset}': dataset does not exist\n",
    )


def test_a_foreign_zfs_snapshot_blocks_the_rollback_to_the_newest_proxmox_snapshot(pve, monkeypatch, capsys):
    ct = create(pve, 164, rootfs="local-zfs:4", cores=1)
    assert snapshot(pve, ct, "pve-only") == "OK"
    dataset = "rpool/data/subvol-164-disk-0"
    sanoid = f"{dataset}@autosnap_2026-12-01_15:00:00_hourly"
    assert zfs_command(pve, monkeypatch, capsys, "snapshot", sanoid) == (0, "", "")
    assert zfs_command(pve, monkeypatch, capsys, "snapshot", sanoid)[2] == (
        f"cannot create snapshot '{sanoid}': dataset already exists\n"
    )
    assert [s["name"] for s in ct.snapshot.get()] == ["pve-only", "current"]  # Proxmox does not list it
    status = pve.wait(ct.snapshot("pve-only").rollback.post())
    assert status["exitstatus"] == (
        "can't rollback, 'pve-only' is not most recent snapshot on 'local-zfs:subvol-164-disk-0'"
    )
    assert "lock:" not in pve.conf_text(164)
    assert zfs_command(pve, monkeypatch, capsys, "destroy", sanoid) == (0, "", "")
    assert pve.wait(ct.snapshot("pve-only").rollback.post())["exitstatus"] == "OK"


def test_a_snapshot_whose_zfs_name_is_taken_fails_and_cleans_up(pve, monkeypatch, capsys):
    ct = create(pve, 165, rootfs="local-zfs:4")
    dataset = "rpool/data/subvol-165-disk-0"
    assert zfs_command(pve, monkeypatch, capsys, "snapshot", f"{dataset}@daily")[0] == 0
    assert snapshot(pve, ct, "daily") == f"zfs error: cannot create snapshot '{dataset}@daily': dataset already exists"
    assert "[daily]" not in pve.conf_text(165) and "lock:" not in pve.conf_text(165)


def test_lvmthin_has_no_feature_snapshot_of_a_snapshot(pve):
    """LvmThinPlugin.pm volume_has_feature: snapshot => {current => 1}, not snap."""
    ct = create(pve, 166, rootfs="local-lvm:4")
    assert snapshot(pve, ct, "s1") == "OK"
    assert ct.feature.get(feature="snapshot") == {"hasFeature": 1}
    assert ct.feature.get(feature="snapshot", snapname="s1") == {"hasFeature": 0}
