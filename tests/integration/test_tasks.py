"""Every task file on its own, against the converged lab: `--dry` changes nothing, and a real run
reports zero changes (the whole deploy's versions of both are in test_deploy.py)."""

import pytest

from tests.conftest import PROJECT
from tests.integration.conftest import grand_total, pyinfra, snapshot

pytestmark = pytest.mark.lab

ALL_TASKS = sorted(path.name for path in (PROJECT / "tasks").glob("*.py"))
# Measurements change what runs while they run (and put it back): their real runs are tested in
# test_bench.py; the NCCL probe needs torch in the target's venv (tests/unit/test_nccl_probe.py).
MEASURING = {"bench.py", "nccl_probe.py"}
# A rollback changes by design (and needs a snapshot): its --dry and real runs are in test_provision.py.
ROLLING_BACK = {"rollback.py", "rollback_snapshot.py"}


@pytest.fixture(scope="module")
def converged(lab):
    pyinfra()
    return lab


@pytest.mark.parametrize("task", [task for task in ALL_TASKS if task not in ROLLING_BACK])
def test_task_file_dry_run_is_pure_and_a_real_run_changes_nothing(converged, task):
    before = snapshot()
    pyinfra("--dry", deploy=f"tasks/{task}", yes=False)
    assert snapshot() == before
    if task in MEASURING:
        return
    _, output = pyinfra(deploy=f"tasks/{task}")
    totals = grand_total(output)
    assert totals["changed"] == 0 and totals["error"] == 0, output
    assert snapshot() == before


def test_every_task_file_is_covered():
    assert {"agent.py", "bench.py", "containers.py", "nccl_env.py", "nccl_probe.py", "preflight.py", "pve_host.py",
            "servers.py", "sglang.py", "status.py"} <= set(ALL_TASKS) - ROLLING_BACK
