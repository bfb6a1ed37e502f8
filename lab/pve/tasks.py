"""PVE worker tasks: a UPID in PVE's format, the work in a thread, a log, and a status that
goes running -> stopped with exitstatus "OK", "WARNINGS: n" or the error text (pve-common
src/PVE/RESTEnvironment.pm fork_worker, src/PVE/UPID.pm read_status, commit f665029).

A failed worker's error is its whole message: fork_worker chomps it and joins its lines with
spaces into one last log line ``TASK ERROR: <message>``, and read_status answers what follows
"TASK ERROR: " as the exit status. What the worker printed before stays in the log.

    UPID:pve1:0001E240:00A3F1C2:6568A1B0:vzcreate:101:root@pam:
"""

import itertools
import os
import re
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


def exit_message(error: str) -> str:
    """fork_worker's `chomp $err; $err =~ s/\\n/ /mg`: the whole error on one line.

    >>> exit_message("startup for container '101' failed\\nrun_buffer: 571 Script exited\\n")
    "startup for container '101' failed run_buffer: 571 Script exited"
    """
    return error.removesuffix("\n").replace("\n", " ")


def status_type(exitstatus: str | None) -> str:
    """UPID.pm normalize_status_type: ok, warning, error or unknown."""
    if not exitstatus or exitstatus == "unexpected status":
        return "unknown"
    if exitstatus == "OK":
        return "ok"
    return "warning" if re.match(r"^WARNINGS: \d+$", exitstatus) else "error"


def split_token_user(task: dict) -> dict:
    """pve-manager PVE/API2/Tasks.pm $convert_token_task: a token's task shows its user and
    `tokenid` apart (``root@pam!deploy`` -> user root@pam, tokenid deploy)."""
    user, sep, tokenid = task["user"].partition("!")
    return dict(task, user=user, tokenid=tokenid) if sep else task


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
        self.endtime: int | None = None
        self.done = threading.Event()

    def status(self) -> dict:
        """GET .../tasks/{upid}/status (Tasks.pm read_task_status)."""
        res = dict(split_token_user(self.info), status="stopped" if self.done.is_set() else "running")
        if self.done.is_set():
            res["exitstatus"] = self.exitstatus
        return res

    def index_entry(self) -> dict:
        """One entry of GET /nodes/{node}/tasks (Tasks.pm node_tasks): a finished task's end
        time and exit status as the task index has them; a running one's status RUNNING."""
        res = split_token_user(self.info)
        if self.done.is_set():
            return dict(res, endtime=self.endtime, status=self.exitstatus)
        return dict(res, status="RUNNING")


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
                message = getattr(e, "message", None) or str(e) or type(e).__name__
                task.exitstatus = exit_message(message)
                task.log.log(f"TASK ERROR: {task.exitstatus}")
            finally:
                task.endtime = int(time.time())
                task.done.set()

        threading.Thread(target=run, name=f"task-{dtype}-{id_}", daemon=True).start()
        return upid

    def get(self, upid: str) -> Task | None:
        with self._lock:
            return self._tasks.get(upid)

    def newest_first(self) -> list[Task]:
        with self._lock:
            return sorted(self._tasks.values(), key=lambda t: (t.info["starttime"], t.info["pid"]), reverse=True)

    def wait(self, upid: str, timeout: float = 30) -> dict:
        """Block until the task ends (tests and the emulator's own synchronous waits)."""
        task = self.get(upid)
        task.done.wait(timeout)
        return task.status()
