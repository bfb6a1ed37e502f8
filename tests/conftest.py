import runpy
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))


def group_data(*names: str) -> dict:
    """Host data as pyinfra builds it from group_data/<name>.py files (later names win)."""
    data = {}
    for name in names:
        module = runpy.run_path(str(PROJECT / "group_data" / f"{name}.py"))
        data.update(
            {
                k: v
                for k, v in module.items()
                if not k.startswith("_") and not callable(v) and not hasattr(v, "__file__")
            }
        )
    return data


@pytest.fixture
def project() -> Path:
    return PROJECT
