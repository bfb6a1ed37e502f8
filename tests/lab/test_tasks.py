"""Every task file on its own, against the converged lab: `--dry` changes nothing, and a real run
reports zero changes (the whole deploy's versions of both are in test_deploy.py)."""

import json

import pytest

from sglang_pve.deploy import paths
from tests.conftest import PROJECT
from tests.lab.conftest import grand_total, pyinfra, sh, snapshot

pytestmark = pytest.mark.lab

ALL_TASKS = sorted(path.name for path in (PROJECT / "tasks").glob("*.py"))
# Measurements change what runs while they run (and put it back): their real runs are tested in
# test_bench.py; the NCCL probe needs torch in the target's venv (tests/unit/test_nccl_probe.py).
MEASURING = {"bench.py", "nccl_probe.py"}
# A snapshot rollback changes by design (and needs a snapshot): its runs are in test_provision.py.
# A release rollback to the release that runs changes nothing (TASK_DATA); its real rollbacks are
# in test_releases_lab.py.
ROLLING_BACK = {"rollback_snapshot.py"}
# Writes its output on the controller (file_sd/<host>.json), which the converging deploy does not
# make: its first real run writes it, the next changes nothing.
CONTROLLER_OUTPUT = {"scrape_targets.py"}


def _current_release() -> str:
    return json.loads(sh(f"python3 {paths.AGENT} releases --dir {paths.RELEASES_DIR}"))["current"]


# What a task needs to be run against the converged lab (the state it converges to is the current one).
TASK_DATA = {
    "switch.py": lambda: ["--data", "server=baseline"],
    "rollback.py": lambda: ["--data", f"to={_current_release()}"],
    "rollback_release.py": lambda: ["--data", f"to={_current_release()}"],
}


@pytest.fixture(scope="module")
def converged(lab):
    pyinfra()
    return lab


@pytest.mark.parametrize("task", [task for task in ALL_TASKS if task not in ROLLING_BACK])
def test_task_file_dry_run_is_pure_and_a_real_run_changes_nothing(converged, task):
    data = TASK_DATA[task]() if task in TASK_DATA else []
    before = snapshot()
    pyinfra("--dry", *data, deploy=f"tasks/{task}", yes=False)
    assert snapshot() == before
    if task in MEASURING:
        return
    if task in CONTROLLER_OUTPUT:
        pyinfra(*data, deploy=f"tasks/{task}")
        assert snapshot() == before  # the hosts are untouched by it
    _, output = pyinfra(*data, deploy=f"tasks/{task}")
    totals = grand_total(output)
    assert totals["changed"] == 0 and totals["error"] == 0, output
    assert snapshot() == before


def test_every_task_file_is_covered():
    assert {
        "agent.py",
        "bench.py",
        "containers.py",
        "nccl_env.py",
        "nccl_probe.py",
        "preflight.py",
        "pve_host.py",
        "servers.py",
        "sglang.py",
        "status.py",
        "switch.py",
        "rollback.py",
        "rollback_release.py",
    } <= set(ALL_TASKS) - ROLLING_BACK
