"""GET/PUT of a container's config: the digest, PVE's refusals, raw lxc lines edited over SSH,
delete=, and pending changes of a running container."""

import hashlib

import pytest
import requests
from proxmoxer.core import ResourceException

from lab.pve.backend import DirBackend
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
    """pve-container LXC/Config.pm vmconfig_hotplug_pending (94f5585): cores is a fastplug option,
    a new devN is hotplugged (device_passthrough_hotplug), features are skipped: pending."""
    ct = pve.client().nodes("pve1").lxc(150)
    assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
    ct.config.put(cores=6, features="nesting=1,keyctl=1", dev0="/dev/nvidia0,mode=0666")
    assert ct.config.get(current=1)["cores"] == 6  # fastplug
    assert ct.config.get(current=1)["dev0"] == "/dev/nvidia0,mode=0666"  # hotplugged: it was new
    assert pve.backend.hotplugged()[-1] == {"vmid": 150, "key": "dev0", "old": None, "new": "/dev/nvidia0,mode=0666"}
    assert "features" not in ct.config.get(current=1)
    assert ct.config.get()["features"] == "nesting=1,keyctl=1"  # the pending view
    assert "[pve:pending]\nfeatures: nesting=1,keyctl=1\n" in pve.conf_text(150)
    assert {"key": "features", "pending": "nesting=1,keyctl=1"} in ct.pending.get()
    ct.config.put(dev0="/dev/nvidia0,mode=0600")  # "don't try to hotplug over existing dev"
    assert ct.config.get(current=1)["dev0"] == "/dev/nvidia0,mode=0666"
    assert {"key": "dev0", "value": "/dev/nvidia0,mode=0666", "pending": "/dev/nvidia0,mode=0600"} in ct.pending.get()
    assert pve.wait(ct.status.stop.post())["exitstatus"] == "OK"
    assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
    assert ct.config.get(current=1)["features"] == "nesting=1,keyctl=1"
    assert "[pve:pending]" not in pve.conf_text(150)
    assert "dev0: /dev/nvidia0,mode=0600" in (pve.backend.root / "started/150.conf").read_text()
    ct.config.put(delete="dev0,features")
    assert pve.wait(ct.status.stop.post())["exitstatus"] == "OK"


NET = "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=10.0.0.150/24,type=veth"


def test_running_container_hotplugs_what_pve_container_hotplugs(pve):
    """net0 through update_net (add, change, delete), memory/swap through the cgroup, hostname
    written at once (LXC_FASTPLUG_OPTIONS), each only for the options of the PUT."""
    ct = pve.client().nodes("pve1").lxc(150)
    assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
    pve.node.conf_path(150).write_text(pve.conf_text(150) + "\n[pve:pending]\nnameserver: 10.0.0.1\n")  # by hand
    ct.config.put(net0=NET, memory=1024, hostname="renamed")
    current = ct.config.get(current=1)
    assert (current["net0"], current["memory"], current["hostname"]) == (NET, 1024, "renamed")
    assert [(h["key"], h["new"]) for h in pve.backend.hotplugged()[-2:]] == [("memory", "1024"), ("net0", NET)]
    assert "nameserver" not in current and {"key": "nameserver", "pending": "10.0.0.1"} in ct.pending.get()
    moved = NET.replace("10.0.0.150", "10.0.0.151")
    ct.config.put(net0=moved)
    assert ct.config.get(current=1)["net0"] == moved and pve.backend.hotplugged()[-1]["old"] == NET
    ct.config.put(delete="net0,swap")
    assert "net0" not in ct.config.get(current=1) and "swap" not in ct.config.get(current=1)
    assert "nameserver: 10.0.0.1" in pve.conf_text(150).split("[pve:pending]")[1]  # untouched by these PUTs
    ct.config.put(revert="nameserver")
    assert pve.wait(ct.status.stop.post())["exitstatus"] == "OK"


def test_a_delete_keeps_a_pending_value_which_only_revert_drops(pve):
    """update_pct_config queues delete= without touching a pending value; cleanup_pending drops
    the delete of a key the current config does not have."""
    ct = pve.client().nodes("pve1").lxc(150)
    assert pve.wait(ct.status.start.post())["exitstatus"] == "OK"
    ct.config.put(features="nesting=1")
    ct.config.put(delete="features")
    assert {"key": "features", "pending": "nesting=1"} in ct.pending.get()
    assert not any(item.get("delete") for item in ct.pending.get())
    ct.config.put(revert="features")
    assert "[pve:pending]" not in pve.conf_text(150)
    assert pve.wait(ct.status.stop.post())["exitstatus"] == "OK"


def test_a_failed_hotplug_fails_the_put_and_writes_nothing(tmp_path):
    failing = DirBackend(tmp_path / "volumes", devices={}, fail={"hotplug": "cgroup write failed"})
    with EmulatedNode(tmp_path, backend=failing) as node:
        px = node.client()
        assert node.wait(px.nodes("pve1").lxc.post(vmid=151, ostemplate=node.TEMPLATE, rootfs="local-lvm:4"))
        ct = px.nodes("pve1").lxc(151)
        assert node.wait(ct.status.start.post())["exitstatus"] == "OK"
        before = node.conf_text(151)
        with pytest.raises(ResourceException) as e:
            ct.config.put(memory=1024, cores=3)
        assert e.value.status_code == 400 and e.value.errors == {
            "memory": "unable to hotplug memory: cgroup write failed"
        }
        assert node.conf_text(151) == before


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
