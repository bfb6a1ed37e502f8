"""Process plumbing SGLang does with prctl and psutil, done here with ctypes and /proc."""

import ctypes
import os
import signal
from typing import List, Optional

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_libc = ctypes.CDLL(None, use_errno=True)


def kill_itself_when_parent_died() -> None:
    """PR_SET_PDEATHSIG=SIGKILL, as every SGLang child process sets it."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def set_process_title(title: str) -> None:
    """Set the kernel comm name (15 bytes: "sglang::scheduler_TP0" shows as "sglang::schedul").

    SGLang uses setproctitle, which also rewrites the command line; the stdlib cannot.
    """
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)


def start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def children(pid: int) -> List[int]:
    """Descendants of `pid` (recursive), like psutil.Process(pid).children(recursive=True)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [child for child, parent in parents.items() if parent == current]
        found.extend(kids)
        frontier.extend(kids)
    return found


def kill_process_tree(parent_pid: int, include_parent: bool = True) -> None:
    """SIGKILL the descendants of `parent_pid`, then (optionally) the process itself.

    Like SGLang's kill_process_tree: processes already reparented to init are not found.
    """
    for child in children(parent_pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if include_parent:
        os.kill(parent_pid, signal.SIGKILL)
