"""The scale lab for the tests under tests/lab/scale/: pve1 and pve2 (`lab up --scale`) and
inventory/lab_scale.py's six guests, deployed once per session. tests/conftest.py makes every module
here one unit of xdist's work, so one worker runs them all on its own slot and this fixture deploys
once for all of them (a module that needs a fresh guest makes its own; one that changes a guest puts
it back). Modules here: `pytestmark = [pytest.mark.lab]` and take `scale_lab`."""

import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from lab import layout
from tests.conftest import PROJECT
from tests.lab.conftest import lab_missing, on_target, pyinfra

INVENTORY = "inventory/lab_scale.py"


def on_guest(*command: str, host: str, check: bool = True) -> subprocess.CompletedProcess:
    """on_target for the scale lab's guest or node `host`, by name: a guest is reached by its vmid
    (layout.SCALE_GUESTS), since the default lab's sglang1 may share the slot (tests/lab/conftest.py GUEST)."""
    guest = layout.SCALE_GUESTS.get(host)
    return on_target(*command, check=check, host=str(guest[1]) if guest else host)


@dataclass(frozen=True)
class ScaleLab:
    inventory: str
    first_output: str  # the session's converging deploy (the first deploy when the slot had no guests)
    created: list[str]  # the vmids that deploy created ("creating container N" lines)


@pytest.fixture(scope="session")
def scale_lab() -> ScaleLab:
    reason = lab_missing()
    if reason:
        pytest.skip(reason)
    subprocess.run([sys.executable, "-m", "lab", "up", "--scale"], cwd=PROJECT, check=True)
    _, output = pyinfra(inventory=INVENTORY)
    created = re.findall(r"creating container (\d+) ", output)
    return ScaleLab(INVENTORY, output, created)
