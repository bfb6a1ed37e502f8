"""Run a helper tool (nvidia-smi, systemctl, py-spy) so that it cannot hang the agent.

`subprocess.run(timeout=)` kills only its direct child and then waits for EOF on the pipes with
no limit: a grandchild that inherited the output pipe, or a child stuck in the driver (state D,
which SIGKILL does not end), makes it wait forever. Here the child gets a process group of its
own, its output is read with select() until the deadline, and on timeout the whole group gets
SIGKILL, our pipe ends are closed and the child is abandoned: a daemon thread reaps it if it
ever exits, nobody waits for it.

    done = run(["nvidia-smi", "--query-gpu=index", "--format=csv"], timeout_s=15)
    done.returncode, done.stdout       # or raises Timeout / OSError
"""

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

OUTPUT_MAX = 4 << 20  # bytes kept per stream (the end of it)


class Timeout(RuntimeError):
    """The tool did not finish within its bound; its process group was killed and abandoned."""


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


def run(argv: list[str], timeout_s: float, env: Mapping[str, str] | None = None) -> Done:
    deadline = time.monotonic() + timeout_s
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        env=env,
    )
    stdout, stderr = child.stdout, child.stderr
    assert stdout is not None and stderr is not None  # PIPE
    output = {stdout.fileno(): bytearray(), stderr.fileno(): bytearray()}
    try:
        _read_until_eof(output, deadline)
        code = child.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, _Deadline):
        _abandon(child)
        raise Timeout(
            f"{argv[0]} did not finish within {timeout_s:g}s (killed its process group, not waiting for it)"
        ) from None
    finally:
        stdout.close()
        stderr.close()
    out, err = (bytes(output[child_fd]).decode("utf-8", "replace") for child_fd in output)
    return Done(code, out, err)


class _Deadline(Exception):
    pass


def _read_until_eof(output: dict[int, bytearray], deadline: float) -> None:
    open_fds = list(output)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Deadline()
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
                continue
            buffer = output[fd]
            buffer += chunk
            del buffer[:-OUTPUT_MAX]


def _abandon(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)  # the group we created for it: its own PID
    except (ProcessLookupError, PermissionError):
        pass
    threading.Thread(target=child.wait, name=f"reap-{child.pid}", daemon=True).start()
