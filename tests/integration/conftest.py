"""The real lab: an LXC container with systemd and sshd, deployed into over real SSH."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import PROJECT

HOST = "sglang1"
PYINFRA = str(PROJECT / ".venv" / "bin" / "pyinfra") if (PROJECT / ".venv" / "bin" / "pyinfra").exists() else "pyinfra"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lab_missing() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    if not shutil.which("lxc-start"):
        return "lxc is not installed (make test installs it)"
    return None


@pytest.fixture(scope="module")
def lab():
    """The lab, up (idempotent, ~0.1 s when already up): per module, since test_lab.py takes it down."""
    reason = lab_missing()
    if reason:
        pytest.skip(reason)
    subprocess.run([sys.executable, "-m", "lab", "up"], cwd=PROJECT, check=True)
    return HOST


def on_target(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command in the lab container (python -m lab exec): arguments are passed unchanged."""
    result = subprocess.run([sys.executable, "-m", "lab", "exec", HOST, "--", *command], cwd=PROJECT,
                            capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}: {result.stdout}{result.stderr}")
    return result


def sh(script: str, check: bool = True) -> str:
    return on_target("bash", "-c", script, check=check).stdout


def pyinfra(*args: str, deploy: str = "deploy.py", check: bool = True, yes: bool = True) -> tuple[int, str]:
    """Run the pyinfra CLI against the lab over SSH; return its exit code and output without colours.
    `yes=False` for --dry (pyinfra skips change detection under -y)."""
    command = [PYINFRA, *(["-y"] if yes else []), "inventory/lab.py", deploy, *args]
    result = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    output = ANSI.sub("", result.stdout + result.stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"pyinfra {deploy} {' '.join(args)} exited {result.returncode}:\n{output}")
    return result.returncode, output


def grand_total(output: str) -> dict[str, int]:
    """The 'Grand total' row of pyinfra's results table: operations that changed, failed, did nothing."""
    row = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output)
    assert row, f"no results table in:\n{output[-2000:]}"
    operations, changed, error, unchanged = (0 if cell == "-" else int(cell) for cell in row.groups())
    return {"operations": operations, "changed": changed, "error": error, "unchanged": unchanged}


MANAGED = "/etc/sglang /etc/nccl.conf /etc/systemd/system /root/.zshrc /opt/sglang /var/lib/sglang-pve"


def snapshot() -> str:
    """Digest of every path the deploy manages plus every unit's state: equal means nothing changed."""
    files = sh(f"find {MANAGED} -xdev \\( -type f -o -type l \\) -printf '%p %m %u %T@\\n' 2>/dev/null | sort; "
               f"find {MANAGED} -xdev -type f -exec sha1sum {{}} + 2>/dev/null | sort", check=False)
    units = sh("systemctl list-units --all --no-legend 'sglang-*' | sort", check=False)
    return files + units
