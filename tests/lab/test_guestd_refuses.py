"""guestd, root on the lab host, refuses what a guest's config would run or reach there (issue 16, 7):
a config in pve1's /etc/pve with an lxc.hook.pre-start line starts nothing, and the hook's
canary on the lab host stays absent; a mount source that is a link on pve1 is refused."""

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from lab import guests, layout, lifecycle, node
from tests.lab.test_pve_node import api

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(not shutil.which("lxc-start"), reason="lxc-start missing (apt-get install lxc)"),
]

VMID = 160


def finished(client, upid: str, timeout: float = 120) -> tuple[str, str]:
    """(exitstatus, log) of a task once it has stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.nodes(layout.NODE).tasks(upid).status.get()
        if status["status"] == "stopped":
            log = "\n".join(line["t"] for line in client.nodes(layout.NODE).tasks(upid).log.get())
            return status["exitstatus"], log
        time.sleep(0.2)
    raise AssertionError(f"task {upid} still running after {timeout} s")


@pytest.fixture(scope="module")
def client():
    if node.schema_dir() is None:
        pytest.skip("REFERENCE SCHEMAS MISSING: pve1 has no API emulator (../shared/reference)")
    lifecycle.up()
    client = api()
    if VMID in {int(ct["vmid"]) for ct in client.nodes(layout.NODE).lxc.get()}:
        finished(client, client.nodes(layout.NODE).lxc(VMID).status.stop.post())
        finished(client, client.nodes(layout.NODE).lxc(VMID).delete())
    upid = client.nodes(layout.NODE).lxc.post(
        vmid=VMID,
        hostname="lab-refused",
        ostemplate=layout.TEMPLATE,
        rootfs="local-lvm:4",
        unprivileged=0,
        net0=f"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:01:60,ip={layout.SUBNET}.60/24,type=veth",
    )
    assert finished(client, upid)[0] == "OK"
    yield client
    finished(client, client.nodes(layout.NODE).lxc(VMID).delete())


def start_with(client, lines: list[str]) -> tuple[str, str]:
    conf = node.ETC_PVE / "nodes" / layout.NODE / "lxc" / f"{VMID}.conf"
    original = conf.read_text()
    conf.write_text(original + "".join(f"{line}\n" for line in lines))  # as an SSH edit on the node would
    try:
        return finished(client, client.nodes(layout.NODE).lxc(VMID).status.start.post())
    finally:
        conf.write_text(original)


def test_a_pre_start_hook_is_refused_and_nothing_runs_on_the_lab_host(client):
    canary = Path(f"/tmp/sglang-pve-lab-canary-{uuid.uuid4().hex}")
    status, log = start_with(client, [f"lxc.hook.pre-start: /usr/bin/touch {canary}"])
    assert status != "OK" and "refused by the lab's guestd: lxc.hook.pre-start" in log, log
    assert not canary.exists()
    assert guests.status(VMID) == "stopped"


def test_a_mount_source_that_is_a_link_on_the_node_is_refused(client):
    pid = guests.container.init_pid(layout.NODE)
    link = Path(f"/proc/{pid}/root/srv-link-{uuid.uuid4().hex[:8]}")
    os.symlink("/etc", link)  # pve1's root: absolute, so through /proc/<pid>/root it is the lab host's /etc
    try:
        status, log = start_with(client, [f"lxc.mount.entry: /{link.name} mnt/x none bind,create=dir 0 0"])
    finally:
        link.unlink()
    assert status != "OK" and "is a symbolic link" in log, log
    assert guests.status(VMID) == "stopped"
