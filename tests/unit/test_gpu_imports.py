"""tests/gpu run on a GPU host that has the standard library, pytest and torch, none of the
controller's packages: their conftest chain and modules must import without them (the shared
conftest once imported pydantic at the top, and every GPU test failed to load on a real H200)."""

import subprocess
import sys

from tests.conftest import PROJECT

# The project's own dependencies (pyproject.toml), none of which a GPU host is given.
CONTROLLER_PACKAGES = ("pyinfra", "jinja2", "yaml", "paramiko", "proxmoxer", "requests", "pydantic", "packaging")

PROBE = f"""
import sys
for name in {CONTROLLER_PACKAGES!r}:
    sys.modules[name] = None  # any import of it raises ImportError
import tests.conftest, tests.gpu.conftest
import pathlib, importlib
for path in sorted(pathlib.Path("tests/gpu").glob("*.py")):
    importlib.import_module("tests.gpu." + path.stem)
print("ok")
"""


def test_gpu_tests_import_without_the_controllers_packages():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
