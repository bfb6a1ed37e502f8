"""Changes that need the container restarted, for real in the lab: each completes in the same run
(the node reboots the container, waits for its sshd, and the container's own deploy reconnects);
a failed reboot leaves the restart owed on the node and the rerun does it, saying why; a
[pve:pending] left by someone else is seen; a second run changes nothing and owes nothing."""

import subprocess

import pytest

from lab import container, guests, layout
from tests.lab.conftest import grand_total, lab_node, on_target, pyinfra, sh
from tests.lab.test_provision import VMID, api_calls_since, faults, log_entries, variant

pytestmark = pytest.mark.lab

CONF = f"/etc/pve/lxc/{VMID}.conf"
DEBT = f"/var/lib/sglang-pve/restart-owed/{VMID}.json"


def on_node(*command: str, check: bool = True, host: str = layout.NODE) -> subprocess.CompletedProcess:
    return on_target(*command, check=check, host=host)


def in_guest(script: str) -> str:
    """A shell script in the container, found by its vmid (its hostname changes in one test)."""
    return on_node("sh", "-c", script, host=str(VMID)).stdout.strip()


def boot_id() -> str:
    """When the container's init started (field 22 of /proc/1/stat: a new one after a restart)."""
    return in_guest("cut -d' ' -f22 /proc/1/stat")


def converged_run(inventory: str = "inventory/lab.py") -> str:
    """A run that must restart nothing and change nothing: its output."""
    start = len(log_entries())
    _, output = pyinfra(inventory=inventory)
    totals = grand_total(output)
    assert totals["changed"] == 0 and totals["error"] == 0, output
    assert [c for c in api_calls_since(start) if not c.startswith("GET ")] == [], output
    assert on_node("test", "-e", DEBT, check=False).returncode == 1
    return output


@pytest.fixture(scope="module")
def deployed(lab):
    faults([])
    pyinfra()
    yield
    faults([])


def restarted_run(inventory: str, reason: str) -> str:
    """A run that must restart the container for `reason` and still deploy into it."""
    before = boot_id()
    _, output = pyinfra(inventory=inventory)
    assert f"restarting container {VMID}: {reason}" in output, output
    assert "reconnected: its container restarted" in output, output
    assert "SSH session not active" not in output and grand_total(output)["error"] == 0, output
    assert boot_id() != before  # the container's init is a new process
    return output


def test_a_removed_mount_line_is_put_back_and_the_deploy_goes_on_after_the_restart(deployed):
    line = "lxc.mount.entry: /data data none bind,ro,create=dir 0 0"
    assert line in on_node("cat", CONF).stdout
    on_node("sed", "-i", f"\\|^{line}$|d", CONF)  # an operator, by hand
    assert sh("findmnt -n -o TARGET /data", check=False).strip() == "/data"  # still mounted: the CT did not restart
    restarted_run("inventory/lab.py", "lxc only apply at start")
    assert line in on_node("cat", CONF).stdout
    assert sh("findmnt -n -o TARGET /data").strip() == "/data"  # mounted again, by the restart
    converged_run()


def test_a_changed_devn_completes_in_the_same_run(deployed):
    """dev0 edited by hand to mode 0600: put back to 0666 by a PUT, which waits in [pve:pending]
    (pve-container never hotplugs over an existing devN), so the container restarts."""
    on_node("sed", "-i", "s|^dev0: /dev/nvidia0,mode=0666$|dev0: /dev/nvidia0,mode=0600|", CONF)
    restarted_run("inventory/lab.py", "dev0 only apply at start")
    assert "dev0: /dev/nvidia0,mode=0666" in on_node("cat", CONF).stdout
    assert sh("stat -c %a /dev/nvidia0").strip() == "666"
    converged_run()


def test_a_start_only_key_whose_reboot_failed_is_restarted_by_the_rerun_which_says_why(deployed, tmp_path):
    renamed = variant(tmp_path, hostname="sglang1b")
    try:
        faults([{"method": "POST", "path": "/nodes/*/lxc/*/status/reboot", "task_error": "shutdown timed out"}])
        code, output = pyinfra(inventory=renamed, check=False)
        assert code != 0 and "POST /nodes/pve1/lxc/129/status/reboot: task failed: shutdown timed out" in output
        assert "[pve:pending]" not in on_node("cat", CONF).stdout  # hostname is written at once...
        assert in_guest("hostname") == "sglang1"  # ...and acts only at start
        owed = on_node("cat", DEBT).stdout
        assert '"keys": ["hostname"]' in owed and "Managed by sglang-pve" in owed
        faults([])
        output = restarted_run(renamed, "restart owed since ")
        assert "restart owed since 20" in output and ": hostname" in output
        assert in_guest("hostname") == "sglang1b"
        converged_run(renamed)
    finally:
        faults([])
        pyinfra(check=False)
    assert in_guest("hostname") == "sglang1"


def test_pending_left_by_someone_else_is_seen_and_applied(deployed):
    node = lab_node()
    node.api.request("PUT", node.path(VMID, "config"), nameserver="10.202.0.1")  # while it runs: pending
    assert "[pve:pending]" in on_node("cat", CONF).stdout
    start = len(log_entries())
    _, dry = pyinfra("--dry", "--diff", yes=False)
    assert "nameserver: (unset) -> 10.202.0.1 (pending: applies at the next start)" in dry, dry
    assert "(restart: nameserver only apply at start)" in dry
    assert [c for c in api_calls_since(start) if not c.startswith("GET ")] == []  # --dry: no write...
    assert on_node("test", "-e", DEBT, check=False).returncode == 1  # ...and no restart recorded
    restarted_run("inventory/lab.py", "nameserver only apply at start")
    assert "[pve:pending]" not in on_node("cat", CONF).stdout
    node.api.request("PUT", node.path(VMID, "config"), delete="nameserver")
    restarted_run("inventory/lab.py", "nameserver only apply at start")
    converged_run()


def guest_memory_limit() -> int:
    """The guest's memory limit as its cgroup holds it (lxc-cgroup on the lab host)."""
    cgroup_file = "memory.max" if guests._unified_cgroup() else "memory.limit_in_bytes"
    return int(container.lxc("lxc-cgroup", guests.name(VMID), cgroup_file).stdout.strip())


def test_live_changes_are_hotplugged_without_a_restart(deployed, tmp_path):
    """cores (fastplug) and memory (the cgroup) change in the running container: no reboot."""
    before, start = boot_id(), len(log_entries())
    _, output = pyinfra(inventory=variant(tmp_path, cores=3, memory=6144))
    assert "restarting container" not in output and grand_total(output)["error"] == 0, output
    assert "POST /nodes/pve1/lxc/129/status/reboot" not in api_calls_since(start)
    assert boot_id() == before and guest_memory_limit() == 6144 << 20
    converged_run(variant(tmp_path, cores=3, memory=6144))
    pyinfra()
    assert boot_id() == before and guest_memory_limit() == 4096 << 20
