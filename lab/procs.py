"""Processes of the lab: daemons tracked by pid files, orphans found by the lab's own paths.

A recorded pid is trusted only while its process is alive (not a zombie) and its command
line still contains a marker the lab chose (a path under the state dir), so a stale pid
file whose number was reused never gets someone else's process killed. Nothing is ever
found by process name.
"""

import contextlib
import os
import signal
import time
from pathlib import Path

from lab.shell import LabError


def live_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in ``pid_file`` if that process is alive and its argv contains ``marker``."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if alive(pid) and marker in _cmdline(pid) else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def pids_using(path: Path) -> list[int]:
    """Live processes whose argv names ``path`` or that are chrooted inside it: the orphans
    (debootstrap, its chrooted dpkg) of a lab run that was killed."""
    target = str(path.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            root = os.readlink(entry / "root")
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone, or PID 1 here
            continue
        chrooted = root == target or root.startswith(target + "/")
        if (chrooted or target in _cmdline(int(entry.name))) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_all(pids: list[int]) -> None:
    """SIGKILL exactly these pids and wait until none is alive."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while any(alive(pid) for pid in pids):
        time.sleep(0.05)


def start_daemon(argv: list[str], pid_file: Path, log_file: Path, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` detached (double fork, new session, cwd /) and record its pid; ``env``
    replaces the environment when given.

    The daemon is not our child, so stopping it later never leaves a zombie behind in a
    long-lived caller such as a pytest session.
    """
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # first child: new session, fork the daemon, exit
        try:
            os.close(read_end)
            os.setsid()
            if os.fork() == 0:
                os.chdir("/")
                log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.write(write_end, str(os.getpid()).encode())
                os.close(write_end)
                os.execvpe(argv[0], argv, env if env is not None else os.environ)
        finally:
            os._exit(127)  # reached only by the first child, or if exec failed
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end) as pipe:
        pid = int(pipe.read() or 0)
    if not pid:
        raise LabError(f"could not start {argv[0]}; see {log_file}")
    pid_file.write_text(f"{pid}\n")
    return pid


def stop(pid_file: Path, marker: str, timeout: float = 5.0) -> int | None:
    """SIGTERM the recorded daemon, SIGKILL it after ``timeout``; forget the pid file.

    Returns the pid that was stopped, or None when nothing matching was running.
    """
    pid = live_pid(pid_file, marker)
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        # watch the pid itself: a daemon may delete its pid file on the way out (lxcfs does)
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            kill_all([pid])
    pid_file.unlink(missing_ok=True)
    return pid
