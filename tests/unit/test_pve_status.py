"""Start, stop, shutdown, destroy and resize answer as PVE does for the state the container
is in."""

import pytest
from proxmoxer.core import ResourceException

from lab.pve.backend import BackendError, DirBackend
from lab.pve.conf import parse
from lab.pve.testing import EmulatedNode


def test_power_state_rules(tmp_path):
    with EmulatedNode(tmp_path, version=8) as pve:
        px = pve.client()
        upid = px.nodes("pve1").lxc.post(vmid=210, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4")
        assert pve.wait(upid)["exitstatus"] == "OK"
        ct = px.nodes("pve1").lxc(210)
        with pytest.raises(ResourceException, match="CT 210 not running"):
            ct.status.stop.post()
        assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
        with pytest.raises(ResourceException, match="CT 210 already running"):
            ct.status.start.post()
        with pytest.raises(ResourceException, match="unable to destroy CT 210 - container is running"):
            ct.delete()
        assert pve.wait(ct.status.shutdown.post(timeout=5))["exitstatus"] == "OK"
        assert ct.status.current.get()["status"] == "stopped"
        assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
        upid = ct.delete(force=1)  # PVE warns "forced to stop CT ... before destroying!"
        assert pve.wait(upid)["exitstatus"] == "WARNINGS: 1"
        log = [entry["t"] for entry in px.nodes("pve1").tasks(upid).log.get()]
        assert log == ["WARN: forced to stop CT 210 before destroying!", "TASK WARNINGS: 1"]
        assert not pve.node.exists(210)
        with pytest.raises(ResourceException, match="Configuration file 'nodes/pve1/lxc/210.conf' does not exist"):
            ct.config.get()


def test_resize_grows_only(tmp_path):
    with EmulatedNode(tmp_path) as pve:
        px = pve.client()
        upid = px.nodes("pve1").lxc.post(vmid=211, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4")
        assert pve.wait(upid)["exitstatus"] == "OK"
        ct = px.nodes("pve1").lxc(211)
        assert pve.wait(ct.resize.put(disk="rootfs", size="+4G"))["exitstatus"] == "OK"
        assert ct.config.get()["rootfs"] == "local-lvm:vm-211-disk-0,size=8G"
        with pytest.raises(ResourceException, match="unable to shrink disk size"):
            ct.resize.put(disk="rootfs", size="6G")
        with pytest.raises(ResourceException, match="disk is already at specified size"):
            ct.resize.put(disk="rootfs", size="8G")


class Unreachable(DirBackend):
    def status(self, vmid):
        raise BackendError("guestd at /run/pve-lab/guestd.sock unreachable: [Errno 111]")


def test_backend_error_outside_a_task_is_a_500(tmp_path):
    with EmulatedNode(tmp_path, backend=Unreachable(tmp_path / "volumes")) as pve:
        pve.node.write(212, parse("hostname: x\n"))
        with pytest.raises(ResourceException) as e:
            pve.client().nodes("pve1").lxc(212).status.current.get()
        assert (e.value.status_code, e.value.content) == (
            500,
            "guestd at /run/pve-lab/guestd.sock unreachable: [Errno 111]",
        )
        assert pve.requests()[-1]["status"] == 500
