"""Releases in the real lab: install A, deploy B (`nightly`), roll back to A byte for byte (its venv
rebuilt from its lock), a never-ready nightly reverted by the switch itself, a broken wheel that
leaves nothing half-built, and the switch task. One flow, in file order: each test starts from
the state the one before left (A runs after each of the last three)."""

import json
import re

import pytest

from lab import layout
from sglang_pve.deploy import paths
from tests.conftest import group_data
from tests.lab.conftest import agent_status, grand_total, pyinfra, restore_servers, sh, unit_state

pytestmark = pytest.mark.lab

A = group_data("all")["sglang_version"]
VENVS = group_data("all")["sglang_venvs_dir"]
BASELINE = paths.unit_name("baseline")


def releases() -> dict:
    """The agent's report of the releases on the host."""
    return json.loads(sh(f"python3 {paths.AGENT} releases --dir {paths.RELEASES_DIR}"))


def current() -> dict:
    report = releases()
    return next(r for r in report["releases"] if r["id"] == report["current"])


def on_disk_sha256(paths_: list[str]) -> dict[str, str]:
    out = sh("sha256sum " + " ".join(paths_))
    return {line.split()[1]: line.split()[0] for line in out.splitlines()}


def server_version(unit: str = BASELINE) -> str:
    """The venv the running server's main process runs from."""
    pid = unit_state(unit)["MainPID"]
    return (
        sh(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        .split()[0]
        .removeprefix(f"{VENVS}/sglang-")
        .removesuffix("/bin/python")
    )


def verdict(server: str = "baseline") -> str:
    return next(s for s in agent_status()["servers"] if s.get("server") == server)["verdict"]


@pytest.fixture(scope="module")
def on_a(lab):
    """A clean start on version A: no releases, no venvs; the lab's wheels may have been rebuilt
    under the same versions, so the container's uv and pip caches go too."""
    restore_servers(deploy=False)
    sh(
        f"systemctl stop 'sglang-*.service'; rm -rf {paths.RELEASES_DIR} {VENVS} /root/.cache/uv /root/.cache/pip",
        check=False,
    )
    pyinfra()
    yield current()
    restore_servers()


def test_nightly_resolves_to_the_newest_in_the_index_and_is_recorded(on_a):
    assert on_a["sglang_version"] == A and on_a["status"] == "ready"
    _, output = pyinfra("--data", "sglang_version=nightly")
    assert f"sglang_version nightly resolved to {layout.GOOD_NIGHTLY}" in output
    record = current()
    assert record["sglang_version"] == layout.GOOD_NIGHTLY and record["status"] == "ready"
    assert record["venv"] == f"{VENVS}/sglang-{layout.GOOD_NIGHTLY}"
    assert server_version() == layout.GOOD_NIGHTLY and verdict() == "ready"
    lock = sh(f"cat {record['lock']['path']}")
    assert (
        f"sglang=={layout.GOOD_NIGHTLY}" in lock
        and "--hash=sha256:" in lock
        and f"# index-url {layout.INDEX_URL}" in lock
    )
    assert sh(f"stat -c %a {record['lock']['path']}").strip() == "600"
    assert sh(f"stat -c %a {paths.RELEASES_DIR} {paths.RELEASES_DIR}/{record['id']}.json").split() == ["700", "600"]
    _, output = pyinfra("--data", "sglang_version=nightly")
    assert grand_total(output)["changed"] == 0, output


def test_rollback_runs_a_again_byte_for_byte_rebuilt_from_its_lock(on_a):
    sh(f"rm -rf {on_a['venv']} {on_a['lock']['path']}")  # retention or a person removed it: the lock is recorded
    _, output = pyinfra("--dry", "--diff", deploy="tasks/rollback.py", yes=False)
    assert f"rolling back to release {on_a['id']}" in output
    started = rf"\+ ExecStart=/usr/bin/env .* {re.escape(on_a['venv'])}/bin/python -m sglang.launch_server"
    assert re.search(started, output), output
    assert current()["sglang_version"] == layout.GOOD_NIGHTLY  # --dry changed nothing

    pyinfra(deploy="tasks/rollback.py")
    assert releases()["current"] == on_a["id"]
    assert server_version() == A and verdict() == "ready"
    recorded = {path: entry["sha256"] for path, entry in on_a["files"].items()}
    assert on_disk_sha256(sorted(recorded)) == recorded  # every managed file byte-identical to A's record
    assert on_disk_sha256([on_a["lock"]["path"]]) == {on_a["lock"]["path"]: on_a["lock"]["sha256"]}  # same lock

    _, output = pyinfra(deploy="tasks/rollback.py")  # the previous release stays A: nothing to do
    assert grand_total(output)["changed"] == 0, output
    _, output = pyinfra("--data", "list=1", deploy="tasks/rollback.py")
    assert f"*  {on_a['id']}" in output and layout.GOOD_NIGHTLY in output


def test_never_ready_release_is_reverted_by_the_switch_and_the_run_fails_naming_the_diagnosis(on_a):
    before = releases()["current"]
    code, output = pyinfra("--data", f'sglang_version="{layout.NEVER_READY_NIGHTLY}"', check=False)
    assert code != 0
    assert "diagnosis: stalled in weights" in output and f"reverted: release {before} runs again" in output
    report = releases()
    assert report["current"] == before
    failed = report["releases"][-1]
    assert failed["sglang_version"] == layout.NEVER_READY_NIGHTLY and failed["status"] == "failed"
    assert "stalled in weights" in failed["failure"]
    assert unit_state(BASELINE)["ActiveState"] == "active" and verdict() == "ready" and server_version() == A
    on_disk = on_disk_sha256(sorted(on_a["files"]))
    assert on_disk == {path: entry["sha256"] for path, entry in on_a["files"].items()}


def test_a_broken_wheel_leaves_nothing_half_built_and_the_server_keeps_running(on_a):
    pid = unit_state(BASELINE)["MainPID"]
    code, output = pyinfra("--data", f'sglang_version="{layout.BROKEN_NIGHTLY}"', check=False)
    assert code != 0 and "sglang-0.5.16.dev20260721" in output
    leftovers = sh(f"ls -a {VENVS}")
    assert layout.BROKEN_NIGHTLY not in leftovers, leftovers  # no venv, no partial build, no lock
    unit = sh(f"cat {paths.unit_path('baseline')}")
    assert f"{VENVS}/sglang-{A}/bin/python" in unit
    assert unit_state(BASELINE)["MainPID"] == pid and verdict() == "ready"  # never stopped
    assert releases()["current"] == on_a["id"]


def test_switch_task_runs_another_configuration_and_back(on_a):
    pyinfra("--data", "server=eagle3-2step", deploy="tasks/switch.py")
    record = current()
    assert record["active_server"] == "eagle3-2step" and record["sglang_version"] == A
    assert unit_state(paths.unit_name("eagle3-2step"))["ActiveState"] == "active"
    assert unit_state(BASELINE)["ActiveState"] == "inactive"
    assert sh(f"systemctl is-enabled {paths.unit_name('eagle3-2step')} {BASELINE}", check=False).split() == [
        "enabled",
        "disabled",
    ]
    _, output = pyinfra("--data", "server=eagle3-2step", deploy="tasks/switch.py")
    assert grand_total(output)["changed"] == 0
    code, output = pyinfra("--data", "server=nope", deploy="tasks/switch.py", check=False)
    assert code != 0 and "use one of baseline, eagle3-2step" in output
    pyinfra()  # the deploy switches back to the inventory's active_server
    assert current()["active_server"] == "baseline" and verdict() == "ready"


def test_retention_keeps_the_way_back_and_a_rollback_goes_to_what_ran_before(on_a):
    """releases_kept=2: baseline ready, a never-ready nightly reverted, eagle3-2step ready: the
    failed release is pruned first, the default rollback returns to baseline and it serves. Then
    rollback, deploy, rollback: back to what ran before that deploy, not to the release rolled back from."""
    kept = ("--data", "releases_kept=2")
    pyinfra(*kept)
    baseline = current()
    assert baseline["active_server"] == "baseline" and baseline["status"] == "ready"
    code, _ = pyinfra(*kept, "--data", f'sglang_version="{layout.NEVER_READY_NIGHTLY}"', check=False)
    assert code != 0 and releases()["releases"][-1]["status"] == "failed"
    pyinfra(*kept, "--data", "active_server=eagle3-2step")
    eagle = current()
    report = releases()
    assert [r["id"] for r in report["releases"]] == [baseline["id"], eagle["id"]]  # the failed one went first
    assert report["previous"] == baseline["id"] and sh(f"test -d {baseline['venv']} && echo kept").strip() == "kept"

    pyinfra(*kept, deploy="tasks/rollback.py")
    assert releases()["current"] == baseline["id"] and verdict() == "ready"
    assert unit_state(BASELINE)["ActiveState"] == "active" and server_version() == A
    probe = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/health_generate').status)"
    assert sh(f'python3 -c "{probe}"').strip() == "200"  # it serves

    pyinfra(*kept, "--data", "nccl_profile=p2p-disabled")  # deploy R3 (baseline, another profile)
    assert current()["nccl_profile"] == "p2p-disabled" and releases()["previous"] == baseline["id"]
    pyinfra(*kept, deploy="tasks/rollback.py")  # back to baseline, not to eagle3-2step (rolled back from)
    assert releases()["current"] == baseline["id"] and verdict() == "ready"
    _, output = pyinfra(*kept, deploy="tasks/rollback.py")  # a second rollback stays
    assert grand_total(output)["changed"] == 0, output
