import ast
import json
import math
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

# Parallel sessions (`make test`: pytest-xdist): worker gwN drives lab slot base + N, base being
# SGLANG_PVE_LAB_SLOT (default 0), each its own bridge, subnet, state dir and guests (lab/layout.py).
# Set here, before anything imports lab.layout (it reads the slot once); xdist sets the worker's
# name before it loads this file (xdist/remote.py), and the lab CLI and pyinfra inherit the slot.
# This file runs twice in a session (pytest's `conftest` and the tests' `tests.conftest`): the base
# is kept apart so that the second run computes the same slot.
LAB_SLOTS = 10  # lab/layout.py: slots 0..9
BASE_SLOT = int(os.environ.setdefault("SGLANG_PVE_LAB_BASE_SLOT", os.environ.get("SGLANG_PVE_LAB_SLOT", "0")))
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ["SGLANG_PVE_LAB_SLOT"] = str(BASE_SLOT + int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw")))


def pytest_configure(config: pytest.Config) -> None:
    workers = getattr(config.option, "numprocesses", None) or 0
    if isinstance(workers, int) and BASE_SLOT + workers > LAB_SLOTS and "PYTEST_XDIST_WORKER" not in os.environ:
        raise pytest.UsageError(
            f"-n {workers} with SGLANG_PVE_LAB_SLOT={BASE_SLOT}: the workers would need lab slots "
            f"{BASE_SLOT}..{BASE_SLOT + workers - 1}, the lab has 0..{LAB_SLOTS - 1}; lower -n or the base slot"
        )


# The seconds each unit of xdist's work took in a CI run (tests/scope_seconds.json, written from a
# run's JUnit XML by tests/scope_seconds.py): the workers take units in collection order and never
# give one back, so a long unit collected late runs alone at the end while the other workers idle.
SCOPE_SECONDS = Path(__file__).with_name("scope_seconds.json")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In `make test`'s workers (--dist loadscope: a unit of work is a module, or the scale lab's
    directory, on one worker, its module fixtures set up once), the units are handed out longest
    first (by SCOPE_SECONDS; one not measured yet as if longest), lab units before the others:
    the workers end together, the lab units' waits overlap the CPU-bound unit tests, and the last
    units handed out are the shortest. The modules that take the lab down (lab_down) come after
    the other lab units: the worker that runs them goes on with tests that need no lab instead of
    bringing its lab up and provisioning sglang1 again. Every worker collects the same order (xdist
    checks), and a unit's tests keep their file order (some modules are one flow)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    seconds = json.loads(SCOPE_SECONDS.read_text()) if SCOPE_SECONDS.exists() else {}
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(scope_of(item.nodeid), []).append(item)

    def rank(scope: str) -> tuple[int, float]:
        first = units[scope][0]
        kind = 2 if not first.get_closest_marker("lab") else 1 if first.get_closest_marker("lab_down") else 0
        return kind, -seconds.get(scope, math.inf)

    items[:] = [item for scope in sorted(units, key=rank) for item in units[scope]]  # sorted is stable


# The scale lab (pve2 and inventory/lab_scale.py's six guests, tests/lab/scale/conftest.py): every
# module under SCALE_DIR is one unit of work for xdist, so one worker runs them all and its one
# session fixture deploys the scale lab once for all of them; the other workers never bring it up.
SCALE_DIR = "tests/lab/scale/"


def scope_of(nodeid: str) -> str:
    """The unit of work of a test: its module (xdist LoadScopeScheduling._split_scope:
    nodeid.rsplit("::", 1)[0]), every module under SCALE_DIR being one."""
    return SCALE_DIR if nodeid.startswith(SCALE_DIR) else nodeid.rsplit("::", 1)[0]


class ScaleLabOnce(LoadScopeScheduling):
    """--dist loadscope with the scale lab's modules as one scope."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """ScaleLabOnce under --dist loadscope (make test); any other --dist: xdist's own."""
    return ScaleLabOnce(config, log) if config.getvalue("dist") == "loadscope" else None


def group_file(name: str) -> dict:
    """The data of group_data/<name>.py as pyinfra reads it: its globals but __names and the names
    its import statements bind (pyinfra_cli/inventory.py _get_group_data)."""
    path = PROJECT / "group_data" / f"{name}.py"
    imported = {
        alias.asname or alias.name.split(".")[0]
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    module = runpy.run_path(str(path))
    return {k: v for k, v in module.items() if not k.startswith("__") and k not in imported}


def model_defaults() -> dict:
    """The toolkit's defaults of every host-data key that has one (HostData, the NCCL probe's mix), as data."""
    # imported here: tests/gpu run on a GPU host with the standard library and torch only, no pydantic
    from pydantic import BaseModel

    from sglang_pve.config.bench import ProbeOptions
    from sglang_pve.config.deployment import HostData

    data = {}
    for key, field in [
        *HostData.model_fields.items(),
        ("nccl_workload_mix", ProbeOptions.model_fields["nccl_workload_mix"]),
    ]:
        if not field.is_required():
            value = field.get_default(call_default_factory=True)
            data[key] = value.model_dump(by_alias=True) if isinstance(value, BaseModel) else value
    return data


def group_data(*names: str) -> dict:
    """Host data as the deploy sees it for hosts in these groups: the model's defaults, then the
    group_data/<name>.py files (later names win)."""
    data = model_defaults()
    for name in names:
        data.update(group_file(name))
    return data


def build_wheel(out_dir: Path) -> Path:
    """The wheel of this checkout's working tree (tracked and not-ignored files, copied first so that
    the build writes nothing into the checkout), built by this venv's setuptools without isolation."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=PROJECT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    source = out_dir / "source"
    for name in filter(None, listed.split("\0")):
        if (PROJECT / name).is_file():  # a deleted tracked file is listed too
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT / name, source / name)
    wheels = out_dir / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, source],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("*.whl")
    return wheel


@pytest.fixture
def project() -> Path:
    return PROJECT
