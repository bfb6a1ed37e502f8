"""Tasks as pve-common and pve-manager answer them: a failed worker's exit status is its whole
message (RESTEnvironment.pm fork_worker joins its lines; UPID.pm read_status reads it back), the
log numbered from 1 with its `total` (Tools.pm dump_logfile), a token's task shown with user and
tokenid apart, PVE's 400 for an unknown UPID, the node's task list with its filters (API2/Tasks.pm);
and the toolkit's run_task carries that whole message and what the worker printed."""

import doctest

import pytest
import requests
from proxmoxer.core import ResourceException

from lab.pve import requestlog, tasks
from lab.pve.testing import PASSWORD, TOKEN_SECRET, EmulatedNode
from sglang_pve.config.proxmox import load_api_settings
from sglang_pve.provision.client import ProxmoxError, connect, worker_lines
from sglang_pve.provision.credentials import Credential

LXC_ERROR = (
    "command 'systemctl start pve-container@300' failed: exit code 1\n"
    'lxc_init: 844 Failed to run lxc.hook.pre-start for container "300"\n'
    '__lxc_start: 2027 Failed to initialize container "300"\n'
)
JOINED = (
    "command 'systemctl start pve-container@300' failed: exit code 1 "
    'lxc_init: 844 Failed to run lxc.hook.pre-start for container "300" '
    '__lxc_start: 2027 Failed to initialize container "300"'
)


def test_doctests():
    assert doctest.testmod(tasks).failed == 0


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:  # its DirBackend fails on demand
        px = node.client()
        upid = px.nodes("pve1").lxc.post(vmid=300, ostemplate=node.TEMPLATE, rootfs="local-lvm:4", unprivileged=1)
        assert node.wait(upid)["exitstatus"] == "OK"
        yield node


def toolkit_api(pve, token=False):
    secret = {"token_name": "deploy", "token_env": "T"} if token else {"password_env": "P"}
    api = load_api_settings(
        "pve1", {"proxmox_api": {"host": "127.0.0.1", "port": pve.port, "ca_file": str(pve.cert), **secret}}
    )
    return connect(api, Credential("root@pam", "deploy" if token else None, TOKEN_SECRET if token else PASSWORD, "t"))


def test_a_failed_task_answers_the_whole_message_as_exit_status(pve):
    pve.backend.fail["start"] = LXC_ERROR
    try:
        upid = pve.client().nodes("pve1").lxc(300).status.start.post()
        status = pve.wait(upid)
    finally:
        del pve.backend.fail["start"]
    assert status["exitstatus"] == JOINED  # the emulator kept only the last line before
    log = pve.client().nodes("pve1").tasks(upid).log.get()
    assert log[-1] == {"n": len(log), "t": f"TASK ERROR: {JOINED}"} and log[0]["n"] == 1


def test_run_task_carries_pves_whole_message(pve):
    pve.backend.fail["start"] = LXC_ERROR
    try:
        with pytest.raises(ProxmoxError) as caught:
            toolkit_api(pve).run_task("POST", "nodes/pve1/lxc/300/status/start")
    finally:
        del pve.backend.fail["start"]
    assert str(caught.value) == f"POST /nodes/pve1/lxc/300/status/start: task failed: {JOINED}"


def test_run_task_adds_what_the_worker_printed(pve):
    """A create whose template is missing: the worker logged its volume, then died."""
    with pytest.raises(ProxmoxError) as caught:
        toolkit_api(pve).run_task(
            "POST", "nodes/pve1/lxc", vmid=301, ostemplate="local:vztmpl/nope.tar.zst", rootfs="local-lvm:4"
        )
    assert str(caught.value) == (
        "POST /nodes/pve1/lxc: task failed: unable to create CT 301 - volume 'local:vztmpl/nope.tar.zst' "
        "does not exist (task log: allocated volume local-lvm:vm-301-disk-0 (4 GiB) for rootfs)"
    )


def test_worker_lines_drop_the_closing_line_and_the_empty_placeholder():
    assert worker_lines(["a", "", "b", "TASK ERROR: b"]) == ["a", "b"]
    assert worker_lines(["TASK OK"]) == [] and worker_lines(["no content"]) == []
    assert worker_lines([f"line {i}" for i in range(30)] + ["TASK WARNINGS: 2"])[0] == "line 20"


def test_the_log_has_pves_numbering_limit_and_total(pve):
    upid = pve.client().nodes("pve1").tasks.get(typefilter="vzcreate", vmid=300)[0]["upid"]
    url = f"https://127.0.0.1:{pve.port}/api2/json/nodes/pve1/tasks/{upid}/log"
    auth = {"Authorization": f"PVEAPIToken=root@pam!deploy={TOKEN_SECRET}"}
    whole = requests.get(url, headers=auth, verify=str(pve.cert), params={"limit": 0}).json()
    assert whole["total"] == len(whole["data"]) and whole["data"][-1]["t"] == "TASK OK"
    first = requests.get(url, headers=auth, verify=str(pve.cert), params={"start": 1, "limit": 1}).json()
    assert first == {"data": [whole["data"][1]], "total": whole["total"]}


def test_a_tokens_task_shows_user_and_tokenid_apart(pve):
    px = pve.client(token=True)
    upid = px.nodes("pve1").lxc(300).snapshot.post(snapname="by-token")
    assert ":root@pam!deploy:" in upid
    status = pve.wait(upid)
    assert (status["user"], status["tokenid"]) == ("root@pam", "deploy")
    assert px.nodes("pve1").tasks(upid).status.get()["user"] == "root@pam"


def test_an_unknown_task_is_pves_400(pve):
    px = pve.client()
    with pytest.raises(ResourceException) as e:
        px.nodes("pve1").tasks("UPID:pve1:00000001:00000002:00000003:vzstart:300:root@pam:").status.get()
    assert (e.value.status_code, e.value.errors) == (400, {"upid": "no such task"})
    with pytest.raises(ResourceException) as e:
        px.nodes("pve1").tasks("not-a-upid").log.get()
    assert e.value.errors == {"upid": "unable to parse worker upid"}


def test_the_task_list_newest_first_with_pves_filters(pve):
    px = pve.client()
    listed = px.nodes("pve1").tasks.get()
    assert listed and all(t["status"] != "RUNNING" for t in listed)
    assert [t["starttime"] for t in listed] == sorted((t["starttime"] for t in listed), reverse=True)
    assert {t["type"] for t in px.nodes("pve1").tasks.get(typefilter="vzsnapshot")} == {"vzsnapshot"}
    failed = px.nodes("pve1").tasks.get(errors=1)
    assert failed and all(tasks.status_type(t["status"]) == "error" for t in failed)
    assert JOINED in {t["status"] for t in failed}
    assert {t["status"] for t in px.nodes("pve1").tasks.get(statusfilter="ok")} == {"OK"}
    assert all(t["id"] == "301" for t in px.nodes("pve1").tasks.get(vmid=301))
    assert len(px.nodes("pve1").tasks.get(limit=1)) == 1
    assert px.nodes("pve1").tasks.get(source="active") == []
    assert requestlog.schema_violations(pve.requests()) == []


def test_proxmoxers_task_tools_read_it_as_pve(pve):
    """proxmoxer/tools/tasks.py, as its users wait for a task: blocking_status polls the status,
    decode_log places each line by its number `n` (1-based, as dump_logfile counts)."""
    from proxmoxer.tools import Tasks

    px = pve.client()
    pve.backend.fail["start"] = LXC_ERROR
    try:
        upid = px.nodes("pve1").lxc(300).status.start.post()
        status = Tasks.blocking_status(px, upid, timeout=30, polling_interval=0.05)
    finally:
        del pve.backend.fail["start"]
    assert (status["status"], status["exitstatus"]) == ("stopped", JOINED)
    assert Tasks.decode_log(px.nodes("pve1").tasks(upid).log.get()) == f"TASK ERROR: {JOINED}"
