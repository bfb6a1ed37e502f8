"""A config locked by a running task refuses changes with "CT is locked (...)"."""

import threading

from proxmoxer.core import ResourceException

from lab.gpus import uvm_major
from lab.pve.backend import DirBackend
from lab.pve.testing import EmulatedNode, fake_gpu_devices


class SlowSnapshots(DirBackend):
    """Snapshots wait until the test lets them finish."""

    def __init__(self, root):
        super().__init__(root, devices=fake_gpu_devices(uvm_major()))
        self.release = threading.Event()
        self.entered = threading.Event()

    def snapshot(self, vmid, name):
        self.entered.set()
        assert self.release.wait(20)
        super().snapshot(vmid, name)


def test_running_snapshot_locks_the_config(tmp_path):
    backend = SlowSnapshots(tmp_path / "volumes")
    with EmulatedNode(tmp_path, backend=backend) as pve:
        px = pve.client()
        upid = px.nodes("pve1").lxc.post(vmid=170, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4")
        assert pve.wait(upid)["exitstatus"] == "OK"
        ct = px.nodes("pve1").lxc(170)
        upid = ct.snapshot.post(snapname="slow")
        assert backend.entered.wait(10)
        assert ct.status.current.get()["lock"] == "snapshot"
        assert px.nodes("pve1").tasks(upid).status.get()["status"] == "running"
        for call in (
            lambda: ct.config.put(cores=2),
            lambda: ct.status.start.post(),
            lambda: ct.snapshot.post(snapname="other"),
        ):
            try:
                result = call()
            except ResourceException as e:
                assert e.content == "CT is locked (snapshot)"
            else:  # a snapshot task is refused inside its worker, as in PVE
                assert pve.wait(result)["exitstatus"] == "CT is locked (snapshot)"
        backend.release.set()
        assert pve.wait(upid)["exitstatus"] == "OK"
        ct.config.put(cores=2)
        assert "lock" not in ct.config.get()
