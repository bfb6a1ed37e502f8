"""Who runs the deploy, from which commit: recorded with every release (controller side).

who()              # "alice@laptop"
commit(project)    # "ba504ac" or "ba504ac+dirty"; None outside a git checkout
run_token()        # "3f9c0a1b2c3d4e5f": this run's, names its deploy lock on every host (agent/lease.py)
"""

import getpass
import secrets
import socket
import subprocess
from functools import cache
from pathlib import Path


@cache
def who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


@cache
def commit(project: Path) -> str | None:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--short=12", "HEAD")
    if not head:
        return None
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


@cache
def run_token() -> str:
    return secrets.token_hex(8)
