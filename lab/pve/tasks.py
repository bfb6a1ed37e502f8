"""PVE worker tasks: a UPID in PVE's format, the work in a thread, a log, and a status that
goes running -> stopped with exitstatus "OK", "WARNINGS: n" or the error text (pve-common
RESTEnvironment::fork_worker, UPID.pm).

    UPID:pve1:0001E240:00A3F1C2:6568A1B0:vzcreate:101:root@pam:
"""

import itertools
import os
import threading
import time

_pids = itertools.count(os.getpid() * 100 + 1)  # distinct fake worker pids


def make_upid(node: str, pid: int, pstart: int, starttime: int, dtype: str, id_: str, user: str) -> str:
    return f"UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{dtype}:{id_}:{user}:"


def parse_upid(upid: str) -> dict | None:
    parts = upid.split(":")
    if len(parts) != 9 or parts[0] != "UPID" or parts[8] != "":
        return None
    try:
        pid, pstart, starttime = (int(p, 16) for p in parts[2:5])
    except ValueError:
        return None
    return {
        "node": parts[1],
        "pid": pid,
        "pstart": pstart,
        "starttime": starttime,
        "type": parts[5],
        "id": parts[6],
        "user": parts[7],
        "upid": upid,
    }


class TaskLog:
    """What a worker prints (`log`) and warns (`warn`, counted for "WARNINGS: n")."""

    def __init__(self):
        self.lines: list[str] = []
        self.warnings = 0

    def log(self, line: str) -> None:
        self.lines.extend(line.rstrip("\n").split("\n"))

    def warn(self, line: str) -> None:
        self.warnings += 1
        self.log(f"WARN: {line}")


class Task:
    def __init__(self, upid: str):
        self.info = parse_upid(upid)
        self.upid = upid
        self.log = TaskLog()
        self.exitstatus: str | None = None
        self.done = threading.Event()

    def status(self) -> dict:
        res = dict(self.info, status="stopped" if self.done.is_set() else "running")
        if self.done.is_set():
            res["exitstatus"] = self.exitstatus
        return res


class Tasks:
    """Runs workers and keeps their tasks (in memory: an emulator restart forgets them)."""

    def __init__(self, node: str):
        self.node = node
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()

    def start(self, dtype: str, id_: str, user: str, work, forced_error: str | None = None) -> str:
        """Run ``work(task_log)`` in a thread; return the UPID at once. An exception's message
        (BackendError, ApiError, ...) becomes the exit status; ``forced_error`` (fault
        injection) ends the task with that error before the work does anything."""
        pid = next(_pids)
        upid = make_upid(self.node, pid, int(time.monotonic() * 100), int(time.time()), dtype, id_, user)
        task = Task(upid)
        with self._lock:
            self._tasks[upid] = task

        def run():
            try:
                if forced_error:
                    raise RuntimeError(forced_error)
                work(task.log)
                task.exitstatus = f"WARNINGS: {task.log.warnings}" if task.log.warnings else "OK"
                task.log.log(f"TASK {task.exitstatus}")
            except Exception as e:  # a Perl die in the worker: any error ends the task
                message = (getattr(e, "message", None) or str(e) or type(e).__name__).strip()
                task.exitstatus = message.split("\n")[-1]
                task.log.log(f"TASK ERROR: {message}")
            finally:
                task.done.set()

        threading.Thread(target=run, name=f"task-{dtype}-{id_}", daemon=True).start()
        return upid

    def get(self, upid: str) -> Task | None:
        with self._lock:
            return self._tasks.get(upid)

    def wait(self, upid: str, timeout: float = 30) -> dict:
        """Block until the task ends (tests and the emulator's own synchronous waits)."""
        task = self.get(upid)
        task.done.wait(timeout)
        return task.status()
