"""`make test`'s parallel sessions: pytest-xdist worker gwN drives lab slot base + N (tests/conftest.py),
the base being the session's SGLANG_PVE_LAB_SLOT, however often the conftest is executed."""

import os
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
