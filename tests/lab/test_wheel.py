"""`pip install sglang-pve` gives a working toolkit: the wheel, built from this checkout and
installed into a fresh virtualenv outside it, plans the lab deploy from a user's own deploy file.

The user's repository (tmp_path): deploy.py imports the installed package and calls its whole
deploy; inventory/lab.py and group_data/lab.py are the lab's, written as values (this process
reads inventory/lab.py and group_data/lab.py of the checkout, which import lab/, not in the
wheel); group_data/all.py and servers.yml are copies. pyinfra runs from the fresh venv with the
user's repository as working directory and no PYTHONPATH: nothing of the checkout is importable.
"""

import os
import re
import runpy
import shutil
import subprocess
import venv

import pytest

from sglang_pve.agent import zipapp
from tests.conftest import PROJECT, build_wheel, group_file
from tests.lab.conftest import ANSI, pyinfra

pytestmark = pytest.mark.lab

USER_DEPLOY = '''"""A user's deploy file: the installed sglang-pve's whole deploy."""

from pyinfra import logger

import sglang_pve as package
from sglang_pve.deploys.full import full_deploy

logger.info(f"sglang_pve imported from {package.__file__}")
full_deploy()
'''
# sglang_pve/deploys/full.py, in order: the agent (whose lock command the rest is under), then under the lock
CONTAINER_DEPLOYS = [
    "Agent",
    "Deploy lock (deploy)",
    "Container restart provisioning owes a replica or TP rank, the fleet's way",
    "Node exporter",
    "SGLang venv",
    "NCCL environment",
    "Servers",
    "Deploy lock given back (deploy)",
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, the user's repository): the wheel installed with its dependencies, the repository written."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(root / "dist")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run([env_dir / "bin" / "pip", "install", "--quiet", wheel], check=True, timeout=600)

    site = root / "site"
    (site / "inventory").mkdir(parents=True)
    (site / "group_data").mkdir()
    (site / "deploy.py").write_text(USER_DEPLOY)
    inventory = runpy.run_path(str(PROJECT / "inventory" / "lab.py"))  # sets the API password's variable too
    (site / "inventory" / "lab.py").write_text(
        '"""The lab, as values (tests/lab/test_wheel.py wrote them from inventory/lab.py)."""\n\n'
        f"pve_nodes = {inventory['pve_nodes']!r}\nsglang_hosts = {inventory['sglang_hosts']!r}\n"
    )
    (site / "group_data" / "lab.py").write_text(
        "".join(f"{key} = {value!r}\n" for key, value in group_file("lab").items())
    )
    shutil.copy(PROJECT / "group_data" / "all.py", site / "group_data" / "all.py")
    shutil.copy(PROJECT / "group_data" / "servers.yml", site / "group_data" / "servers.yml")
    return env_dir, site


def planned(output: str) -> list[list[str]]:
    """The rows of the --dry plan ('Detected changes'): [operation, change, conditional change]."""
    table = output.split("--> Detected changes:", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [re.split(r"\s{2,}", line.strip()) for line in table if line.strip()]


def test_the_installed_wheel_plans_the_lab_deploy_from_a_users_repository(lab, installed):
    env_dir, site = installed
    pyinfra()  # converged: every file of the plan below is as the checkout renders it
    _, checkout = pyinfra("--dry", yes=False)

    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [env_dir / "bin" / "pyinfra", "inventory/lab.py", "deploy.py", "--dry"],
        cwd=site,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    output = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode == 0, output

    purelib = subprocess.run(
        [env_dir / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    imported = set(re.findall(r"sglang_pve imported from (\S+)", output))
    assert imported == {os.path.join(purelib, "sglang_pve", "__init__.py")}, output
    rows = planned(output)
    assert rows == planned(checkout)  # the same operations, and the same changes, as the checkout's own deploy.py
    assert all(change == "-" for _, *changes in rows for change in changes), rows  # rendered alike: nothing to change
    names = [row[0] for row in rows]
    node_deploy = [
        "sglang-pve | Node preparation | NVIDIA modules at boot, device-node unit before pve-guests",
        "sglang-pve | Node preparation | nvidia-persistenced.service and sglang-pve-nvidia-nodes.service enabled and "
        "running",
        "sglang-pve | Containers | NVIDIA device nodes as the driver numbers them",
        "sglang-pve | Containers | Container 129 (sglang1)",
        "sglang-pve | Nodes prepared and containers provisioned",
    ]
    assert names[: len(node_deploy)] == node_deploy
    deploys = [name.split(" | ")[1] for name in names[len(node_deploy) :]]
    assert sorted(set(deploys), key=deploys.index) == CONTAINER_DEPLOYS, names


def test_the_installed_package_builds_the_same_agent_zipapp(installed):
    env_dir, site = installed
    built = subprocess.run(
        [
            env_dir / "bin" / "python",
            "-c",
            "import sys; from sglang_pve.agent import zipapp; sys.stdout.buffer.write(zipapp.build())",
        ],
        cwd=site,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert built == zipapp.build()
