"""Creating a container through the emulator with proxmoxer, as the toolkit will: what
root@pam with a ticket may do, what a token of root@pam may not, the version's defaults."""

import pytest
from proxmoxer.core import ResourceException

from lab.pve import requestlog
from lab.pve.backend import DirBackend
from lab.pve.testing import EmulatedNode

GPU_CT = dict(
    hostname="sglang1",
    cores=8,
    memory=4096,
    swap=0,
    rootfs="local-zfs:8",
    net0="name=eth0,bridge=vmbr0,ip=10.0.0.11/24,gw=10.0.0.1",
    onboot=1,
    unprivileged=0,
    features="nesting=1",
    startup="order=2",
    dev0="/dev/nvidia0,mode=0666",
    dev1="/dev/nvidia-uvm,mode=0666",
    dev2="mode=0666,path=/dev/nvidiactl",
    mp0="/srv/models,mp=/shared,ro=1",
)


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:
        yield node


def test_root_ticket_creates_gpu_container(pve):
    px = pve.client()
    upid = px.nodes("pve1").lxc.post(
        vmid=129, ostemplate=pve.TEMPLATE, start=1, **{"ssh-public-keys": "ssh-ed25519 AAAAC3Nza lab"}, **GPU_CT
    )
    assert upid.startswith("UPID:pve1:") and ":vzcreate:129:root@pam:" in upid
    assert pve.wait(upid)["exitstatus"] == "OK"
    conf = pve.conf_text(129)
    assert "dev1: /dev/nvidia-uvm,mode=0666\n" in conf and "mp0: /srv/models,mp=/shared,ro=1\n" in conf
    assert "rootfs: local-zfs:subvol-129-disk-0,size=8G\n" in conf and "lock:" not in conf
    assert px.nodes("pve1").lxc(129).status.current.get()["status"] == "running"
    rootfs = pve.backend.volume_dir("local-zfs:subvol-129-disk-0")
    assert (rootfs / "root/.ssh/authorized_keys").read_text() == "ssh-ed25519 AAAAC3Nza lab\n"
    assert requestlog.schema_violations(pve.requests()) == []


def test_token_of_root_is_not_root(pve):
    px = pve.client(token=True)
    with pytest.raises(ResourceException) as e:
        px.nodes("pve1").lxc.post(vmid=130, ostemplate=pve.TEMPLATE, **GPU_CT)
    assert e.value.status_code == 403
    assert e.value.content == ("Permission check failed (configuring device passthrough is only allowed for root@pam)")
    with pytest.raises(ResourceException, match="changing feature flags for privileged container"):
        px.nodes("pve1").lxc.post(
            vmid=130, ostemplate=pve.TEMPLATE, hostname="x", rootfs="local-lvm:4", unprivileged=0, features="nesting=1"
        )
    bind_only = {k: v for k, v in GPU_CT.items() if not k.startswith(("dev", "features"))}
    with pytest.raises(ResourceException, match="mount point type bind is only allowed for root@pam"):
        px.nodes("pve1").lxc.post(vmid=130, ostemplate=pve.TEMPLATE, **bind_only)
    assert not pve.node.exists(130)


def test_existing_vmid_and_missing_device_refused(pve):
    px = pve.client()
    if not pve.node.exists(129):  # made by the test above where it ran on this worker (pytest -n without loadscope)
        assert pve.wait(px.nodes("pve1").lxc.post(vmid=129, ostemplate=pve.TEMPLATE, **GPU_CT))["exitstatus"] == "OK"
    with pytest.raises(ResourceException, match="CT 129 already exists on node 'pve1'"):
        px.nodes("pve1").lxc.post(vmid=129, ostemplate=pve.TEMPLATE, **GPU_CT)
    with pytest.raises(ResourceException, match="Device /dev/nvidia9 does not exist"):
        px.nodes("pve1").lxc.post(vmid=131, ostemplate=pve.TEMPLATE, dev0="/dev/nvidia9", storage="local-lvm")
    with pytest.raises(ResourceException, match="/dev/nvidia-caps is not a device"):
        px.nodes("pve1").lxc.post(vmid=131, ostemplate=pve.TEMPLATE, dev0="/dev/nvidia-caps", storage="local-lvm")


def test_missing_template_is_a_task_error_and_leaves_nothing(pve):
    px = pve.client()
    upid = px.nodes("pve1").lxc.post(vmid=132, ostemplate="local:vztmpl/nope.tar.zst", storage="local-lvm")
    status = pve.wait(upid)
    assert status["exitstatus"] == ("unable to create CT 132 - volume 'local:vztmpl/nope.tar.zst' does not exist")
    assert not pve.node.exists(132)


@pytest.mark.parametrize("version, expected", [(8, None), (9, "1")])
def test_unprivileged_default_per_version(tmp_path, version, expected):
    with EmulatedNode(tmp_path, version=version) as pve:
        px = pve.client()
        upid = px.nodes("pve1").lxc.post(vmid=140, ostemplate=pve.TEMPLATE, storage="local-lvm")
        assert pve.wait(upid)["exitstatus"] == "OK"
        cfg = px.nodes("pve1").lxc(140).config.get()
        assert cfg.get("unprivileged") == (int(expected) if expected else None)
        assert cfg["rootfs"] == "local-lvm:vm-140-disk-0,size=4G"
        with pytest.raises(ResourceException) as e:
            px.nodes("pve1").lxc.post(vmid=141, ostemplate=pve.TEMPLATE)
        assert e.value.errors == {"storage": "storage 'local' does not support container directories"}


def test_backend_failure_is_the_task_error_and_cleans_up(tmp_path):
    backend = DirBackend(tmp_path / "volumes", fail={"create": "guestd: lxc-create failed"})
    with EmulatedNode(tmp_path, backend=backend) as pve:
        upid = pve.client().nodes("pve1").lxc.post(vmid=142, ostemplate=pve.TEMPLATE, storage="local-lvm")
        assert pve.wait(upid)["exitstatus"] == "guestd: lxc-create failed"
        assert not pve.node.exists(142)
        log = [entry["t"] for entry in pve.client().nodes("pve1").tasks(upid).log.get()]
        assert log[-1] == "TASK ERROR: guestd: lxc-create failed"
