"""A config locked by a running task refuses changes with "CT is locked (...)"."""

import threading

from proxmoxer.core import ResourceException

from lab.gpus import uvm_major
from lab.pve.backend import DirBackend
from lab.pve.testing import EmulatedNode, fake_gpu_devices

HANG_S = 120  # a backend step the test holds is let go long before this (under load: seconds later)


class SlowSnapshots(DirBackend):
    """Snapshots wait until the test lets them finish."""

    def __init__(self, root):
        super().__init__(root, devices=fake_gpu_devices(uvm_major()))
        self.release = threading.Event()
        self.entered = threading.Event()

    def snapshot(self, vmid, name):
        self.entered.set()
        assert self.release.wait(HANG_S)
        super().snapshot(vmid, name)


def test_running_snapshot_locks_the_config(tmp_path):
    backend = SlowSnapshots(tmp_path / "volumes")
    with EmulatedNode(tmp_path, backend=backend) as pve:
        px = pve.client()
        upid = px.nodes("pve1").lxc.post(vmid=170, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4")
        assert pve.wait(upid)["exitstatus"] == "OK"
        ct = px.nodes("pve1").lxc(170)
        upid = ct.snapshot.post(snapname="slow")
        assert backend.entered.wait(HANG_S)
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


class SlowCreate(DirBackend):
    """A create that waits until the test lets it finish."""

    def __init__(self, root):
        super().__init__(root, devices=fake_gpu_devices(uvm_major()))
        self.release = threading.Event()
        self.entered = threading.Event()

    def create(self, *args, **kwargs):
        self.entered.set()
        assert self.release.wait(HANG_S)
        super().create(*args, **kwargs)


def test_a_start_issued_during_the_create_waits_for_its_config_lock(tmp_path):
    """pve-container API2/LXC.pm create_vm runs the create under lock_config in its worker and
    Status.pm vm_start takes the lock in its own worker: the start's UPID comes at once, its task
    runs while the create holds the lock and starts the CT after it; a create still holding the
    lock past PVE's 10 s leaves the start with lock_config's timeout."""
    backend = SlowCreate(tmp_path / "volumes")
    with EmulatedNode(tmp_path, backend=backend) as pve:
        px = pve.client()
        for vmid, released_in_time in ((170, True), (171, False)):
            backend.entered.clear()
            backend.release.clear()
            create = px.nodes("pve1").lxc.post(vmid=vmid, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4")
            assert backend.entered.wait(HANG_S)
            start = px.nodes("pve1").lxc(vmid).status.start.post()
            assert px.nodes("pve1").tasks(start).status.get()["status"] == "running"
            if released_in_time:  # half a second of the start's 10 s: it waits, then starts the CT
                threading.Timer(0.5, backend.release.set).start()
                assert pve.wait(create)["exitstatus"] == "OK"
                assert pve.wait(start)["exitstatus"] == "OK" and backend.status(vmid) == "running"
            else:  # held until the start gave up (not a timer at 11 s, 1 s past it: under load it can come first)
                assert pve.wait(start)["exitstatus"].endswith(f"pve-config-{vmid}.lock' - got timeout")
                backend.release.set()
                assert pve.wait(create)["exitstatus"] == "OK"
                assert backend.status(vmid) != "running"
