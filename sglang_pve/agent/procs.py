"""The process table, read from /proc (SGLANG_PVE_PROC), and killing by PID only.

A process is identified by (pid, start time in clock ticks): before every signal the start time
is checked again, so a PID that was reused by an unrelated process is never signalled. Nothing
here looks processes up by name.
"""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from sglang_pve.agent import overrides


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int | None  # start time in clock ticks since boot (/proc/PID/stat field 22)


def _path(pid: int, name: str) -> str:
    return f"{overrides.proc_root()}/{pid}/{name}"


def pids() -> list[int]:
    try:
        return sorted(int(entry) for entry in os.listdir(overrides.proc_root()) if entry.isdigit())
    except OSError:
        return []


def stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) of a process, or None when it does not exist."""
    try:
        with open(_path(pid, "stat"), "rb") as handle:
            data = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rfind(")") + 2 :].split()  # the command in (...) may contain spaces
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def parent(pid: int) -> int:
    """The parent's PID (0 when the process is gone)."""
    try:
        with open(_path(pid, "stat"), "rb") as handle:
            data = handle.read().decode("ascii", "replace")
        return int(data[data.rfind(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def exe(pid: int) -> str:
    """The program file the process runs ("" when unreadable)."""
    try:
        return os.readlink(_path(pid, "exe"))
    except OSError:
        return ""


def identify(pid: int) -> Proc | None:
    info = stat(pid)
    return None if info is None else Proc(pid, info[1])


def alive(proc: Proc) -> bool:
    """Running (not a zombie) and still the same process (same start time)."""
    info = stat(proc.pid)
    return info is not None and info[0] not in ("Z", "X") and (proc.start is None or info[1] == proc.start)


def cmdline(pid: int) -> str:
    try:
        with open(_path(pid, "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def environ_value(pid: int, name: str) -> str | None:
    """One variable of the environment the process was started with (None: unset/unreadable)."""
    try:
        with open(_path(pid, "environ"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "replace")
    return None


def fd_targets(pid: int) -> list[str]:
    """Where the process's open file descriptors point (O_PATH descriptors included)."""
    directory = _path(pid, "fd")
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    targets = []
    for name in names:
        try:
            targets.append(os.readlink(f"{directory}/{name}"))
        except OSError:  # closed meanwhile
            continue
    return targets


@contextlib.contextmanager
def sigterm_ignored() -> Iterator[None]:
    """Ignore SIGTERM inside the block (where Python allows it: the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminate(procs: list[Proc], grace_s: float = 10.0, kill_wait_s: float = 10.0) -> list[Proc]:
    """SIGTERM each process, wait up to grace_s, SIGKILL the rest, wait up to kill_wait_s until
    they are gone. Returns the processes still alive (e.g. stuck in the driver, state D)."""
    _signal_all(procs, signal.SIGTERM)
    survivors = wait_gone(procs, grace_s)
    if survivors:
        _signal_all(survivors, signal.SIGKILL)
        survivors = wait_gone(survivors, kill_wait_s)
    return survivors


def kill(proc: Proc) -> bool:
    """SIGKILL one process by PID (after checking it is still that process)."""
    return bool(_signal_all([proc], signal.SIGKILL))


def wait_gone(procs: list[Proc], timeout_s: float, poll_s: float = 0.05) -> list[Proc]:
    deadline = time.monotonic() + timeout_s
    while True:
        survivors = [proc for proc in procs if alive(proc)]
        if not survivors or time.monotonic() >= deadline:
            return survivors
        time.sleep(poll_s)


def _signal_all(procs: list[Proc], signum: int) -> list[Proc]:
    sent = []
    for proc in procs:
        if not alive(proc):
            continue
        try:
            os.kill(proc.pid, signum)
            sent.append(proc)
        except ProcessLookupError:
            pass
    return sent
