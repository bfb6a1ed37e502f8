import ast
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))


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
