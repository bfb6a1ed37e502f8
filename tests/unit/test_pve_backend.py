"""DirBackend: the directory stand-in for volumes the emulator's unit tests act on."""

import pytest

from lab.pve.backend import BackendError, DirBackend


def test_lifecycle_snapshot_rollback(tmp_path):
    b = DirBackend(tmp_path)
    b.create(101, {"hostname": "ct"}, "local:vztmpl/t.tar.zst", "local-lvm:vm-101-disk-0")
    rootfs = b.volume_dir("local-lvm:vm-101-disk-0")
    assert (rootfs / "TEMPLATE").read_text() == "local:vztmpl/t.tar.zst\n"
    assert b.status(101) == "stopped"
    b.start(101, "hostname: ct\n")
    assert b.status(101) == "running"
    b.stop(101)
    b.snapshot(101, "before")
    (rootfs / "changed").write_text("x")
    b.rollback(101, "before")
    assert not (rootfs / "changed").exists()
    b.delete_snapshot(101, "before")
    with pytest.raises(BackendError, match="does not exist"):
        b.rollback(101, "before")
    b.destroy(101)
    assert not rootfs.exists() and b.status(101) == "stopped"


def test_injected_failure_and_devices(tmp_path):
    b = DirBackend(tmp_path, devices={"/dev/nvidia0": ("c", 195, 0)}, fail={"start": "boom"})
    with pytest.raises(BackendError, match="boom"):
        b.start(101, "")
    assert b.device("/dev/nvidia0") == ("c", 195, 0)
    assert b.device("/dev/nvidia-uvm") is None
    assert DirBackend(tmp_path).device("/dev/null") == ("c", 1, 3)
    assert DirBackend(tmp_path).device(str(tmp_path))[0] == "-"
