"""Provisioning through the lab node's Proxmox API, for real: pve1 (the emulator validating every
request against the real schema) creates sglang1 as a real LXC container, and the same deploy goes
on into it over SSH through pve1. One deploy from nothing; a second run writes nothing; a change is
reviewed with --dry --diff, snapshotted, rolled back; API faults leave nothing half applied."""

import json
import subprocess
import sys
from itertools import takewhile

import pytest

from lab import gpus, layout, node
from lab.pve import requestlog
from sglang_pve.provision import snapshots
from sglang_pve.provision.client import ProxmoxError
from tests.conftest import PROJECT, group_data
from tests.lab.conftest import grand_total, lab_node, on_target, pyinfra, sh, snapshot

pytestmark = pytest.mark.lab

VMID = layout.SGLANG_VMID
TUNED = group_data("all")["nccl_profiles"]["pcie-tuned"]


def log_entries() -> list[dict]:
    return requestlog.read(layout.PVE_REQUEST_LOG) if layout.PVE_REQUEST_LOG.exists() else []


def api_calls_since(start: int) -> list[str]:
    """`METHOD path` of every request since `start`, the ticket login left out."""
    return [f"{e['method']} {e['path']}" for e in log_entries()[start:] if e["path"] != "/access/ticket"]


def destroy_guest() -> None:
    node = lab_node()
    listed = node.containers().get(VMID)
    if listed and listed["status"] == "running":
        node.api.run_task("POST", node.path(VMID, "status", "stop"))
    if listed:
        node.api.run_task("DELETE", node.path(VMID))


def variant(tmp_path, **container) -> str:
    """inventory/lab.py with the container spec changed; named lab.py so group_data/lab.py applies."""
    path = tmp_path / "lab.py"
    path.write_text(
        "import runpy\n"
        f"_lab = runpy.run_path({str(PROJECT / 'inventory' / 'lab.py')!r})\n"
        "pve_nodes = _lab['pve_nodes']\n"
        "_name, _data = _lab['sglang_hosts'][0]\n"
        f"sglang_hosts = [(_name, {{**_data, 'container': {{**_data['container'], **{container!r}}}}})]\n"
    )
    return str(path)


def faults(rules: list) -> None:
    layout.PVE_FAULTS.write_text(json.dumps(rules))


def node_sh(command: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "lab", "exec", layout.NODE, "--", "sh", "-c", command],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def from_nothing(lab):
    """pve1 without container 129 and without the nvidia-uvm pair (as after a boot where nothing
    has opened it yet: the driver makes it lazily), then ONE deploy; the request-log offset before it."""
    destroy_guest()
    node_sh("rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools")
    start = len(log_entries())
    _, output = pyinfra()
    return start, output


def test_a_node_without_the_uvm_pair_gets_it_before_the_container_is_created(from_nothing):
    """The node preparation restarted its unit (the pair was missing), which made uvm at minor 0
    and tools at 1 before the container was created and started (PVE stats each devN then:
    pve-container LXC/Tools.pm get_device_mode_and_rdev), and the container has them."""
    _, output = from_nothing
    assert "(/dev/nvidia-uvm, /dev/nvidia-uvm-tools not as the driver numbers them)" in output, output
    uvm = gpus.uvm_major()
    assert node_sh("stat -c '%Hr %Lr' /dev/nvidia-uvm /dev/nvidia-uvm-tools").split() == [str(uvm), "0", str(uvm), "1"]
    assert sh("stat -c '%Hr %Lr' /dev/nvidia-uvm /dev/nvidia-uvm-tools").split() == [str(uvm), "0", str(uvm), "1"]


def test_one_deploy_creates_the_container_with_8_gpus_and_deploys_the_rest(from_nothing):
    start, output = from_nothing
    calls = api_calls_since(start)
    assert "POST /nodes/pve1/lxc" in calls and "POST /nodes/pve1/lxc/129/status/start" in calls
    assert "connected: running the deploy in the new container" in output
    listed = on_target("nvidia-smi", "-L").stdout.splitlines()
    assert len(listed) == 8 and all(line.startswith(f"GPU {i}: ") for i, line in enumerate(listed))
    nodes = sh("stat -c '%n %t:%T %a' /dev/nvidia*").split("\n")
    assert {line.split()[0] for line in nodes if line} == {
        *(f"/dev/nvidia{i}" for i in range(8)),
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    }
    assert all(line.endswith(" 666") for line in nodes if line)
    assert sh("systemctl is-active sglang-baseline").strip() == "active"
    assert sh("findmnt -n -o OPTIONS /shared").split(",")[0] == "ro"  # raw bind mount line, read-only


def test_second_run_makes_no_api_write_and_reports_no_change(from_nothing):
    start = len(log_entries())
    _, output = pyinfra()
    totals = grand_total(output)
    assert totals["changed"] == 0 and totals["error"] == 0, output
    # one read of the container: its pending list holds its current values too (provision/nodes.py)
    assert api_calls_since(start) == ["GET /nodes/pve1/lxc", "GET /nodes/pve1/lxc/129/pending"]


def test_a_locked_container_refuses_the_run_with_nothing_written(from_nothing, tmp_path):
    """A `lock:` key (here a vzdump's) refuses the run at plan time: no API write, the config file
    byte for byte as it was; it is where pve-container keeps it, as pmxcfs shows it."""
    seen = on_target("stat", "-c", "%U:%G %a", f"/etc/pve/nodes/{layout.NODE}/lxc/{VMID}.conf", host=layout.NODE)
    assert seen.stdout.strip() == "root:www-data 640"  # the emulator's and the raw edit's writes, on pmxcfs
    assert on_target("readlink", "/etc/pve/lxc", host=layout.NODE).stdout.strip() == f"nodes/{layout.NODE}/lxc"
    conf = node.ETC_PVE / "nodes" / layout.NODE / "lxc" / f"{VMID}.conf"
    original = conf.read_text()
    conf.write_text(original.replace("arch:", "lock: backup\narch:", 1))
    locked, start = conf.read_bytes(), len(log_entries())
    try:
        code, output = pyinfra(inventory=variant(tmp_path, cores=6), check=False)
        assert code != 0 and f"container {VMID} on node {layout.NODE} is locked (backup)" in output, output
        assert f"run `pct unlock {VMID}` on {layout.NODE}" in output
        assert {call.split()[0] for call in api_calls_since(start)} == {"GET"}
        assert conf.read_bytes() == locked
    finally:
        on_target("pct", "unlock", str(VMID), host=layout.NODE)
    assert conf.read_text() == original


def test_dry_diff_lists_exactly_the_changed_cores_and_nccl_value(from_nothing, tmp_path):
    profiles = group_data("all")["nccl_profiles"]
    profiles["pcie-tuned"] = TUNED | {"NCCL_NTHREADS": 256}
    before, start = snapshot(), len(log_entries())
    _, output = pyinfra(
        "--dry",
        "--diff",
        "--data",
        f"nccl_profiles={json.dumps(profiles)}",
        yes=False,
        inventory=variant(tmp_path, cores=6),
    )
    after = output.split("Will modify container 129 (sglang1) on pve1\n", 1)[1].splitlines()
    section = list(takewhile(lambda line: line.strip() and not line.strip().startswith("["), after))
    assert [line.strip() for line in section] == ["cores: 4 -> 6"], output
    changed = [line for line in output.splitlines() if line.lstrip().startswith(("- ", "+ ")) and "NCCL" in line]
    assert changed and all("NCCL_NTHREADS" in line for line in changed), changed
    assert snapshot() == before  # nothing changed in the container...
    assert [c for c in api_calls_since(start) if not c.startswith("GET ")] == []  # ...nor through the API


def test_snapshot_before_a_change_and_rollback_restores_config_and_root_filesystem(from_nothing, tmp_path):
    node = lab_node()
    before = {s["name"] for s in node.api.get(node.path(VMID, "snapshot"))}
    pyinfra(inventory=variant(tmp_path, cores=6))
    taken = [s for s in lab_node().api.get(node.path(VMID, "snapshot")) if s["name"] not in before]
    assert len(taken) == 1 and taken[0]["name"].startswith("sgpve-") and taken[0]["name"].endswith("-config")
    assert taken[0]["description"] == "sglang-pve: before changing cores"
    assert lab_node().config(VMID)["cores"] == 6
    sh("echo after-the-snapshot > /root/rollback-marker")

    start = len(log_entries())
    _, output = pyinfra("--dry", "--diff", "--data", "rollback=snapshot", deploy="tasks/rollback.py", yes=False)
    assert f"Will roll back container 129 to {taken[0]['name']}" in output, output
    assert [c for c in api_calls_since(start) if not c.startswith("GET ")] == []  # --dry: nothing rolled back
    assert sh("cat /root/rollback-marker").strip() == "after-the-snapshot"

    pyinfra("--data", "rollback=snapshot", deploy="tasks/rollback.py")

    assert lab_node().config(VMID)["cores"] == 4  # the config...
    assert sh("cat /root/rollback-marker 2>/dev/null || echo gone").strip() == "gone"  # ...and the root filesystem
    _, output = pyinfra()  # back where the data says: nothing to do
    assert grand_total(output)["changed"] == 0, output


@pytest.mark.parametrize(
    "rule, call, message",
    [
        (
            {"method": "POST", "path": "/nodes/*/lxc/*/snapshot", "task_error": "snapshot feature is not available"},
            "POST /nodes/pve1/lxc/129/snapshot",
            "task failed: snapshot feature is not available",
        ),
        (
            {"method": "PUT", "path": "/nodes/*/lxc/*/config", "http_status": 500, "message": "got timeout"},
            "PUT /nodes/pve1/lxc/129/config",
            "500 got timeout",
        ),
        (
            {
                "method": "PUT",
                "path": "/nodes/*/lxc/*/config",
                "http_status": 500,
                "message": "detected modified configuration - file changed by other user? Try again.",
            },
            "PUT /nodes/pve1/lxc/129/config",
            "nothing was overwritten: run again to review the new state",
        ),
    ],
)
def test_an_api_fault_names_the_call_leaves_nothing_half_applied_and_the_rerun_converges(
    from_nothing, tmp_path, rule, call, message
):
    if rule["path"].endswith("/snapshot"):
        # a change whose rollback point is not there yet: after the rollback test the newest of ours
        # holds the current config and would be reused (no snapshot call to fail); there and back
        pyinfra(inventory=variant(tmp_path, cores=5))
        pyinfra()
    conf_before = lab_node().config(VMID)
    faults([rule])
    try:
        code, output = pyinfra(inventory=variant(tmp_path, cores=6), check=False)
    finally:
        faults([])
    assert code != 0 and f"{call}: " in output and message in output, output
    after = lab_node().config(VMID)
    assert after["cores"] == conf_before["cores"] == 4  # nothing half applied
    _, output = pyinfra()
    assert grand_total(output)["changed"] == 0, output


def test_a_slow_or_unreachable_node_names_the_call(from_nothing, tmp_path):
    faults([{"method": "GET", "path": "/nodes/*/lxc", "delay_s": 4}])
    try:
        inventory = tmp_path / "lab.py"
        inventory.write_text(open(variant(tmp_path)).read() + "pve_nodes[0][1]['proxmox_api']['timeout_s'] = 2\n")
        code, output = pyinfra(inventory=str(inventory), check=False)
    finally:
        faults([])
    assert code != 0 and f"GET /nodes/pve1/lxc: no answer from {layout.NODE_ADDRESS}:8006 within 2s" in output, output
    inventory.write_text(open(variant(tmp_path)).read() + "pve_nodes[0][1]['proxmox_api']['port'] = 8007\n")
    code, output = pyinfra(inventory=str(inventory), check=False)
    assert code != 0 and f"POST /access/ticket: node unreachable at {layout.NODE_ADDRESS}:8007" in output, output


def test_preflight_refuses_a_user_space_driver_other_than_the_nodes(from_nothing):
    library = "/etc/sglang-sim/driver-version"
    installed = sh(f"cat {library}")
    try:
        sh(f"echo 570.00.01 > {library}")
        code, output = pyinfra(deploy="tasks/preflight.py", check=False)
    finally:
        sh(f"printf %s '{installed}' > {library}")
    assert (
        code != 0
        and f"the container's user-space NVIDIA driver is 570.00.01 but node pve1 runs {layout.DRIVER_VERSION}"
        in output
    ), output
    assert "Fix: install exactly" in output


def on_node(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    """A command on pve1 as root (what sanoid or an operator runs there)."""
    return on_target(*command, check=check, host=layout.NODE)


def ours() -> list[str]:
    node = lab_node()
    return [s["name"] for s in snapshots.listed(node, VMID) if s["name"].startswith(snapshots.PREFIX)]


def test_two_failed_retries_keep_every_earlier_snapshot_and_take_no_duplicate(from_nothing, tmp_path):
    for cores in (5, 6):  # two changes with snapshots_keep: 2: two rollback points
        pyinfra(inventory=variant(tmp_path, cores=cores, snapshots_keep=2))
    earlier = ours()
    assert len(earlier) == 2
    faults([{"method": "PUT", "path": "/nodes/*/lxc/*/config", "http_status": 500, "message": "got timeout"}])
    try:
        for _ in range(2):
            code, output = pyinfra(inventory=variant(tmp_path, cores=7, snapshots_keep=2), check=False)
            assert code != 0 and "PUT /nodes/pve1/lxc/129/config: 500 got timeout" in output, output
    finally:
        faults([])
    after_failures = ours()
    assert after_failures[:2] == earlier and len(after_failures) == 3  # one new rollback point, reused once
    assert lab_node().config(VMID)["cores"] == 6
    start = len(log_entries())
    pyinfra(inventory=variant(tmp_path, cores=7, snapshots_keep=2))
    writes = [c for c in api_calls_since(start) if not c.startswith("GET ")]
    assert writes.index(f"DELETE /nodes/pve1/lxc/129/snapshot/{earlier[0]}") > writes.index(
        "PUT /nodes/pve1/lxc/129/config"
    )
    assert "POST /nodes/pve1/lxc/129/snapshot" not in writes  # the retry's snapshot was reused
    assert ours() == after_failures[1:]
    pyinfra()  # back where the data says


def test_a_sanoid_snapshot_blocks_the_rollback_and_is_named_before_any_write(from_nothing, tmp_path):
    pyinfra(inventory=variant(tmp_path, cores=5))  # a Proxmox snapshot to roll back to
    newest = ours()[-1]
    dataset = "rpool/data/subvol-129-disk-0"
    sanoid = f"{dataset}@autosnap_2026-12-01_15:00:00_hourly"
    on_node("zfs", "snapshot", sanoid)
    try:
        listed = on_node("zfs", "list", "-H", "-r", "-t", "snapshot", "-o", "name", "-s", "creation", dataset)
        assert listed.stdout.splitlines()[-2:] == [f"{dataset}@{newest}", sanoid]
        start = len(log_entries())
        code, output = pyinfra("--data", "rollback=snapshot", deploy="tasks/rollback.py", check=False)
        assert code != 0 and f"container 129 cannot be rolled back to {newest}" in output, output
        assert f"has newer ones: {sanoid} (1 not taken by Proxmox" in output and f"zfs destroy {sanoid}" in output
        assert [c for c in api_calls_since(start) if not c.startswith("GET ")] == []
        # what Proxmox itself answers (ZFSPoolPlugin.pm volume_rollback_is_possible): the reason, no names
        node = lab_node()
        with pytest.raises(ProxmoxError) as refused:
            node.api.run_task("POST", node.path(VMID, "snapshot", newest, "rollback"))
        assert f"can't rollback, '{newest}' is not most recent snapshot on 'local-zfs:subvol-129-disk-0'" in str(
            refused.value
        )
    finally:
        on_node("zfs", "destroy", sanoid)
    pyinfra()  # back where the data says


def test_dir_storage_with_snapshots_kept_is_refused_before_any_write(from_nothing, tmp_path):
    start = len(log_entries())
    spec = {"vmid": 131, "hostname": "sglang-dir", "rootfs": {"storage": "local", "size_gb": 8}, "snapshots_keep": 2}
    code, output = pyinfra(inventory=variant(tmp_path, **spec), check=False)
    assert code != 0 and (
        "container.snapshots_keep = 2: container 131 cannot be snapshotted on node pve1 (rootfs on storage "
        "'local' (type dir))" in output
    ), output
    assert "Fix: put the container's volumes on a snapshot-capable storage" in output
    assert [c for c in api_calls_since(start) if not c.startswith("GET ")] == []


def test_every_request_the_toolkit_made_passed_the_schema(from_nothing):
    start = from_nothing[0]
    entries = log_entries()[start:]
    assert entries and requestlog.schema_violations(entries) == []
    assert all(e["user"] in ("root@pam", None) for e in entries)


def test_an_operators_devn_survives_a_deploy(from_nothing):
    """A devN the toolkit did not add (an operator's /dev/fuse) is kept by the deploy, index and all."""
    node_sh("[ -c /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229")
    node = lab_node()
    node.api.request("PUT", node.path(VMID, "config"), dev20="/dev/fuse,mode=0666")
    start = len(log_entries())
    try:
        pyinfra()
        after = lab_node().config(VMID)
        assert after["dev20"] == "/dev/fuse,mode=0666"
        touched = [e for e in log_entries()[start:] if "dev20" in json.dumps(e.get("params", {}))]
        assert touched == [], "the deploy touched the operator's dev20"
    finally:
        lab_node().api.request("PUT", node.path(VMID, "config"), delete="dev20")
