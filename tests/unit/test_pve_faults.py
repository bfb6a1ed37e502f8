"""Fault injection: an HTTP error once, a task ending in error, a delay past the client's
timeout, a dropped connection."""

import pytest
import requests
from proxmoxer.core import ResourceException

from lab.pve.testing import EmulatedNode


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:
        upid = node.client().nodes("pve1").lxc.post(vmid=200, ostemplate=node.TEMPLATE, rootfs="local-lvm:4")
        assert node.wait(upid)["exitstatus"] == "OK"
        yield node
        node.faults([])


def test_http_status_fires_times_then_stops(pve):
    pve.faults(
        [{"method": "PUT", "path": "/nodes/*/lxc/*/config", "http_status": 500, "message": "got timeout", "times": 1}]
    )
    ct = pve.client().nodes("pve1").lxc(200)
    with pytest.raises(ResourceException) as e:
        ct.config.put(cores=2)
    assert (e.value.status_code, e.value.content) == (500, "got timeout")
    assert "cores" not in ct.config.get()  # nothing applied
    ct.config.put(cores=2)
    assert ct.config.get()["cores"] == 2


def test_task_error(pve):
    pve.faults([{"path": "/nodes/*/lxc/*/status/start", "task_error": "startup for container '200' failed"}])
    status = pve.wait(pve.client().nodes("pve1").lxc(200).status.start.post())
    assert status["exitstatus"] == "startup for container '200' failed"


def test_delay_and_drop(pve):
    pve.faults([{"path": "/nodes/*/lxc/*/status/current", "delay_s": 2}, {"path": "/cluster/nextid", "drop": True}])
    with pytest.raises(requests.exceptions.Timeout):
        pve.client(timeout=0.5).nodes("pve1").lxc(200).status.current.get()
    with pytest.raises(requests.exceptions.ConnectionError):
        pve.client().cluster.nextid.get()


def test_task_error_changes_nothing(pve):
    pve.faults(
        [
            {"method": "POST", "path": "/nodes/*/lxc", "task_error": "unable to create CT 201 - injected"},
            {"method": "POST", "path": "/nodes/*/lxc/*/snapshot", "task_error": "boom"},
        ]
    )
    px = pve.client()
    upid = px.nodes("pve1").lxc.post(vmid=201, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4")
    assert pve.wait(upid)["exitstatus"] == "unable to create CT 201 - injected"
    assert not pve.node.exists(201)
    before = pve.conf_text(200)
    assert pve.wait(px.nodes("pve1").lxc(200).snapshot.post(snapname="pre"))["exitstatus"] == "boom"
    assert pve.conf_text(200) == before
