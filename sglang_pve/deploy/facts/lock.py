"""The container's deploy lock (agent/lease.py), taken and given back through facts.

Facts, not operations: pyinfra counts every operation that runs a command as a change, and a lock
is no change to the host (a second deploy must still report zero changes). pyinfra 3 runs a
host's operation functions, and the facts they read, in order at execution time, so the lock taken
here covers every operation of the task that comes after it. Without -y (under --dry, and before
the confirmation prompt) it also runs them once at prepare time (pyinfra 3.10 api/operation.py
_wrap_operation: state.should_check_for_changes); that pass only reads who holds the lock
(DeployLockHolder): taking it would write the lease, and a --dry run writes nothing.
"""

import json
import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from sglang_pve.agent.contract import LOCK_COUNT
from sglang_pve.deploy import paths


@dataclass(frozen=True)
class LockResult:
    held: bool  # this run holds the lock now
    message: str  # the agent's last words: who held it, how long it waited, or why not
    agent: bool = True  # False: no agent on the host yet (nothing of the toolkit runs there to race)
    holder: dict | None = None  # not held: the lease of the run that holds it (agent/lease.py), if any


def _agent(args: str) -> str:
    agent = shlex.quote(paths.AGENT)
    return f"if [ -f {agent} ]; then python3 {agent} {args} --dir {shlex.quote(paths.RELEASES_DIR)}; fi"


class DeployLock(FactBase[LockResult]):
    """Take the container's deploy lock for this run (waiting up to wait_s seconds for another run);
    with `expect`, only while its count is still that one (LockCount: the run read the container then).

    host.get_fact(DeployLock, token="3f9c0a1b2c3d4e5f", owner="alice@laptop", task="deploy", wait_s=3600)
    # LockResult(held=True, message="deploy lock of /var/lib/sglang-pve/releases held for ...")
    """

    @staticmethod
    def default() -> LockResult:
        return LockResult(True, "", agent=False)

    def command(self, token, owner, task, wait_s, expect=None):
        return _agent(
            f"lock --json --token {shlex.quote(token)} --owner {shlex.quote(owner)} --task {shlex.quote(task)} "
            f"--wait {int(wait_s)}" + ("" if expect is None else f" --expect {int(expect)}")
        )

    def process(self, output):
        lines = [line for line in output if line.startswith("{")]
        if not lines:
            return self.default()
        document = json.loads(lines[-1])
        holder = document.get("holder")
        return LockResult(bool(document["held"]), str(document["message"]), holder=holder or None)


class DeployUnlock(FactBase[str]):
    """Give the lock back at the end of the run: what the agent says.

    host.get_fact(DeployUnlock, token="3f9c0a1b2c3d4e5f")  # "deploy lock of /var/lib/sglang-pve/releases released"
    """

    @staticmethod
    def default() -> str:
        return ""

    def command(self, token):
        return _agent(f"unlock --token {shlex.quote(token)}")

    def process(self, output):
        return "\n".join(output).strip()


class DeployLockHolder(FactBase):
    """Who holds the container's deploy lock, taking and writing nothing (agent `holder`): the lease
    of the run that holds it (agent/lease.py), None when it is free or no agent is there yet.

    host.get_fact(DeployLockHolder)
    # {"token": "feedfacefeedface", "owner": "bob@desk", "task": "bench", "started": "2026-12-01T14:50:03Z", ...}
    """

    @staticmethod
    def default() -> None:
        return None

    def command(self):
        return _agent("holder")

    def process(self, output):
        text = "\n".join(output).strip()
        return json.loads(text) if text else None


class LockCount(FactBase["int | None"]):
    """The deploy lock's count (agent/lease.py count: odd while held, moved on by every taking),
    read as a run's first read of the container (facts/host_basics.py): 0 where the lock was never
    taken, None where the file holds no count (the run then takes the lock before its first read).

    host.get_fact(LockCount)  # 14
    """

    def command(self):
        path = shlex.quote(f"{paths.RELEASES_DIR}/{LOCK_COUNT}")
        return f"if [ -e {path} ]; then head -c 32 {path}; else echo 0; fi"

    def process(self, output):
        text = "".join(output).strip()
        return int(text) if text.isdigit() else None
