"""`make test`'s parallel sessions: pytest-xdist worker gwN drives lab slot base + N (tests/conftest.py),
the base being the session's SGLANG_PVE_LAB_SLOT, however often the conftest is executed."""

import json
import os
import shutil
import subprocess
import sys

from tests.conftest import PROJECT

# tests/conftest.py executed twice, as a session runs it (pytest's `conftest`, the tests' `tests.conftest`)
TWICE = (
    "import runpy, os; runpy.run_path('tests/conftest.py'); runpy.run_path('tests/conftest.py'); "
    "from lab import layout; print(os.environ.get('SGLANG_PVE_LAB_SLOT', '-'), layout.SLOT, layout.BRIDGE)"
)


def slot_of(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PVE_LAB_", "PYTEST_XDIST_"))}
    done = subprocess.run(
        [sys.executable, "-c", TWICE], cwd=PROJECT, env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def test_worker_n_drives_the_base_slot_plus_n():
    assert slot_of({"SGLANG_PVE_LAB_SLOT": "6", "PYTEST_XDIST_WORKER": "gw2"}) == ["8", "8", "sgpve-br8"]
    assert slot_of({"PYTEST_XDIST_WORKER": "gw1"}) == ["1", "1", "sgpve-br1"]


def test_without_workers_the_slot_is_the_sessions():
    assert slot_of({"SGLANG_PVE_LAB_SLOT": "4"}) == ["4", "4", "sgpve-br4"]
    assert slot_of({}) == ["-", "0", "sgpve-br0"]


def test_more_workers_than_slots_are_refused_before_any_test():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PVE_LAB_", "PYTEST_XDIST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "3", "tests/unit/test_worker_slots.py"],
        cwd=PROJECT,
        env={**env, "SGLANG_PVE_LAB_SLOT": "8"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "-n 3 with SGLANG_PVE_LAB_SLOT=8: the workers would need lab slots 8..10" in done.stdout + done.stderr


MODULE = """
import os
import pytest

@pytest.mark.parametrize("i", range(4))
def test_record(i, tmp_path_factory):
    with open(os.environ["RECORD"], "a") as record:
        record.write(f"{__name__} {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def test_a_module_runs_whole_on_one_worker(tmp_path):
    """make test's scheduling with this conftest, on a sample suite: a module is one unit of work,
    all its tests on one worker (its module fixtures set up once, on one lab slot)."""
    shutil.copy(PROJECT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nmarkers = ["lab: x", "lab_down: y"]\n')
    for name, marks in [("a", "lab"), ("b", "lab"), ("down1", "lab, pytest.mark.lab_down"), ("u", "")]:
        mark = f"pytestmark = [pytest.mark.{marks}]\n" if marks else ""
        (tmp_path / f"test_{name}.py").write_text(MODULE + mark.replace("pytest.mark.pytest.mark.", "pytest.mark."))
    record = tmp_path / "record"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PVE_LAB_", "PYTEST_XDIST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "3", "--dist", "loadscope"],
        cwd=tmp_path,
        env={**env, "RECORD": str(record), "SGLANG_PVE_LAB_SLOT": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for line in record.read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers
    assert set(workers) == {"test_a", "test_b", "test_down1", "test_u"}

    # one worker: the units in the order it gets them; the lab_down module after the other lab ones
    record.unlink()
    (tmp_path / "test_0down.py").write_text(MODULE + "pytestmark = [pytest.mark.lab, pytest.mark.lab_down]\n")
    one_env = {**env, "RECORD": str(record), "SGLANG_PVE_LAB_SLOT": "1"}
    one = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "1", "--dist", "loadscope"]
        + ["--no-loadscope-reorder"],
        cwd=tmp_path,
        env=one_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one.returncode == 0, one.stdout + one.stderr
    order = list(dict.fromkeys(line.split()[0] for line in record.read_text().splitlines()))
    assert order == ["test_a", "test_b", "test_0down", "test_down1", "test_u"], order

    # with recorded seconds: longest first within lab, lab_down and the rest; one not measured
    # (test_v) first of its kind
    record.unlink()
    (tmp_path / "test_v.py").write_text(MODULE)
    seconds = {"test_a.py": 5, "test_b.py": 50, "test_0down.py": 1, "test_down1.py": 30, "test_u.py": 3}
    (tmp_path / "scope_seconds.json").write_text(json.dumps(seconds))
    one = subprocess.run(one.args, cwd=tmp_path, env=one_env, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stdout + one.stderr
    order = list(dict.fromkeys(line.split()[0] for line in record.read_text().splitlines()))
    assert order == ["test_b", "test_a", "test_down1", "test_0down", "test_v", "test_u"], order
