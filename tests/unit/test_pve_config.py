"""GET/PUT of a container's config: the digest, PVE's refusals, raw lxc lines edited over SSH,
delete=, and pending changes of a running container."""

import hashlib

import pytest
import requests
from proxmoxer.core import ResourceException

from lab.pve.testing import EmulatedNode


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:
        px = node.client()
        upid = px.nodes("pve1").lxc.post(
            vmid=150, ostemplate=node.TEMPLATE, hostname="ct", rootfs="local-lvm:4", cores=2, unprivileged=1, onboot=1
        )
        assert node.wait(upid)["exitstatus"] == "OK"
        yield node


def test_wrong_requests_get_pves_400(pve):
    ct = pve.client().nodes("pve1").lxc(150)
    with pytest.raises(ResourceException) as e:
        ct.config.put(onboot=True)
    assert (e.value.status_code, e.value.content) == (400, "Parameter verification failed.")
    assert e.value.errors == {"onboot": "type check ('boolean') failed - got 'True'"}
    with pytest.raises(ResourceException) as e:
        ct.config.put(**{"lxc.cgroup2.devices.allow": "c 195:* rwm"})
    assert e.value.errors == {
        "lxc.cgroup2.devices.allow": "property is not defined in schema "
        "and the schema does not allow additional properties"
    }


def test_digest_detects_a_concurrent_edit(pve):
    ct = pve.client().nodes("pve1").lxc(150)
    digest = ct.config.get()["digest"]
    ct.config.put(cores=3, digest=digest)
    with pytest.raises(ResourceException) as e:
        ct.config.put(cores=4, digest=digest)
    assert e.value.status_code == 500
    assert e.value.content == ("detected modified configuration - file changed by other user? Try again.")
    assert ct.config.get()["cores"] == 3


def test_ssh_edit_of_raw_lines_is_seen(pve):
    px = pve.client()
    upid = px.nodes("pve1").lxc(150).snapshot.post(snapname="first")
    assert pve.wait(upid)["exitstatus"] == "OK"
    path = pve.node.conf_path(150)
    text = path.read_text()
    head, sep, tail = text.partition("\n[first]")
    path.write_text(head.rstrip("\n") + "\nlxc.mount.entry: /srv/data data none bind,create=dir 0 0\n" + sep + tail)
    cfg = px.nodes("pve1").lxc(150).config.get()
    assert cfg["lxc"] == [["lxc.mount.entry", "/srv/data data none bind,create=dir 0 0"]]
    assert "lxc" not in px.nodes("pve1").lxc(150).config.get(snapshot="first")
    assert cfg["digest"] == hashlib.sha1(path.read_bytes()).hexdigest()


def test_delete_and_its_refusals(pve):
    ct = pve.client().nodes("pve1").lxc(150)
    ct.config.put(delete="onboot")
    assert "onboot" not in ct.config.get()
    with pytest.raises(ResourceException, match="unable to delete required option 'memory'"):
        ct.config.put(delete="memory")
    with pytest.raises(ResourceException) as e:
        ct.config.put(delete="nosuchkey")
    assert e.value.errors == {"delete": "unknown option 'nosuchkey'"}


def test_running_container_keeps_non_hotplug_changes_pending(pve):
    ct = pve.client().nodes("pve1").lxc(150)
    assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
    ct.config.put(cores=6, features="nesting=1,keyctl=1", dev0="/dev/nvidia0,mode=0666")
    assert ct.config.get(current=1)["cores"] == 6  # hotplugged
    assert "features" not in ct.config.get(current=1) and "dev0" not in ct.config.get(current=1)
    assert ct.config.get()["dev0"] == "/dev/nvidia0,mode=0666"
    assert ct.config.get()["features"] == "nesting=1,keyctl=1"  # the pending view
    assert "[pve:pending]\ndev0: /dev/nvidia0,mode=0666\nfeatures: nesting=1,keyctl=1\n" in pve.conf_text(150)
    assert {"key": "features", "pending": "nesting=1,keyctl=1"} in ct.pending.get()
    assert pve.wait(ct.status.stop.post())["exitstatus"] == "OK"
    assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
    assert ct.config.get(current=1)["features"] == "nesting=1,keyctl=1"
    assert "[pve:pending]" not in pve.conf_text(150)
    assert "dev0: /dev/nvidia0,mode=0666" in (pve.backend.root / "started/150.conf").read_text()
    assert pve.wait(ct.status.stop.post())["exitstatus"] == "OK"


def test_json_body_takes_json_booleans(pve):
    login = pve.client().get_tokens()
    url = f"https://127.0.0.1:{pve.port}/api2/json/nodes/pve1/lxc/150/config"
    auth = {
        "cookies": {"PVEAuthCookie": login[0]},
        "verify": str(pve.cert),
        "headers": {"CSRFPreventionToken": login[1]},
    }
    assert requests.put(url, json={"onboot": True, "cores": 2}, **auth).json() == {"data": None}
    assert pve.client().nodes("pve1").lxc(150).config.get()["onboot"] == 1
    r = requests.put(url, json={"onboot": "true", "cores": [2]}, **auth)
    assert (r.status_code, r.reason) == (400, "Parameter verification failed.")
    assert r.json()["errors"] == {
        "onboot": "type check ('boolean') failed - got 'true'",
        "cores": "type check ('integer') failed - got ARRAY",
    }
