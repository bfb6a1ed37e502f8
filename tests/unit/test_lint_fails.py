r"""`make lint` fails on a forbidden import: its own lint-imports line, run in a copy of the tree
with one deliberately broken import, names the broken contract and the import.

By hand, in a checkout (then `git checkout sglang_pve/agent/gate.py`):
    printf '\n\nimport pyinfra  # noqa: E402,F401\n' >> sglang_pve/agent/gate.py && make lint
"""

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = {
    c["id"]: c["name"]
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}
VENV = Path(sys.executable).parent.parent


def make_lint() -> list[list[str]]:
    """The ruff and lint-imports commands of `make lint`, as make would run them (-n: printed)."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "lint", f"VENV={VENV}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [shlex.split(line) for line in printed if "/ruff " in line or "/lint-imports" in line]


def tree(tmp_path: Path) -> Path:
    """The packages lint-imports reads and its configuration; lint-imports imports them from its
    working directory (ahead of the editable install)."""
    for package in ("sglang_pve", "lab"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def lint(where: Path) -> subprocess.CompletedProcess:
    """make lint's lint-imports, after its ruff lines pass: the import is tidy, only the layers break."""
    *ruff, lint_imports = make_lint()
    assert len(ruff) >= 2 and "lint-imports" in lint_imports[0]
    for command in ruff:
        done = subprocess.run(command, cwd=where, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    return subprocess.run(lint_imports, cwd=where, capture_output=True, text=True, timeout=300)


def test_the_copy_passes(tmp_path):
    done = lint(tree(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(NAMES)} kept, 0 broken." in done.stdout


# (file, line added at its end, the contract it breaks, the import lint-imports names)
BROKEN = {
    "a third-party package in the shipped code": (
        "sglang_pve/agent/gate.py",
        "import pyinfra  # noqa: E402,F401",
        "agent-stdlib",
        "sglang_pve.agent.gate -> pyinfra",
    ),
    "config reaching up into tools": (
        "sglang_pve/config/safe.py",
        "from sglang_pve.tools import status_render  # noqa: E402,F401",
        "layers",
        "sglang_pve.config.safe -> sglang_pve.tools.status_render",
    ),
    "the shipped code reaching up into the controller": (
        "sglang_pve/agent/phases.py",
        "from sglang_pve.deploy import paths  # noqa: E402,F401",
        "layers",
        "sglang_pve.agent.phases -> sglang_pve.deploy.paths",
    ),
    "the toolkit importing the test world": (
        "sglang_pve/deploy/paths.py",
        "from lab import layout  # noqa: E402,F401",
        "no-lab",
        "sglang_pve.deploy.paths -> lab.layout",
    ),
    "the lab importing controller code": (
        "lab/shell.py",
        "from sglang_pve.deploy import render  # noqa: E402,F401",
        "lab-no-controller",
        "lab.shell -> sglang_pve.deploy.render",
    ),
    "the lab importing the agent beyond its contract": (
        "lab/layout.py",
        "from sglang_pve.agent import switch  # noqa: E402,F401",
        "lab-contract-only",
        "lab.layout -> sglang_pve.agent.switch",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_forbidden_import_fails_and_is_named(tmp_path, case):
    file, line, contract, named = BROKEN[case]
    where = tree(tmp_path)
    path = where / file
    path.write_text(f"{path.read_text()}\n\n{line}\n")
    done = lint(where)
    assert done.returncode != 0
    assert f"{NAMES[contract]} BROKEN" in done.stdout, done.stdout
    assert f"Contracts: {len(NAMES) - 1} kept, 1 broken." in done.stdout
    assert named in done.stdout
