"""The agent's own messages: `[2026-07-20 10:00:00 sglang-pve gate] phase weights -> kv_cache (312 s)`.

The unit's `StandardOutput=append:/var/log/sglang/NAME.log` applies to every Exec line, so what
prestart, gate and poststop print lands in the server log, which the gate and the watchdog follow.
The `sglang-pve <tool>` tag marks those lines; `is_own()` lets the followers ignore them, so the
agent's own words never count as the server's progress. A tqdm bar may be half drawn when a
message comes (no line end yet): the message then starts on a new line, so it stays a line of its
own. Under systemd (INVOCATION_ID set) each message also goes to the journal through syslog, so
`journalctl -u sglang-NAME` shows it.
"""

import os
import re
import sys
import syslog
import time
from typing import Protocol, TextIO

_OWN = re.compile(r"^\[[^\]]* sglang-pve [a-z]+\] ")


def is_own(text: str) -> bool:
    return bool(_OWN.match(text))


class Say(Protocol):
    """What the agent's steps report through (a Reporter)."""

    def __call__(self, text: str, error: bool = False) -> None: ...


class Reporter:
    """say(text): tagged lines to `stream` and to the server log `log` (once: not again when
    `stream` already is that file, as under the unit), and to the journal under systemd."""

    def __init__(self, tool: str, stream: TextIO | None = None, log: str | None = None):
        self.tool = tool
        self.stream = stream if stream is not None else sys.stdout
        self.log = log
        self.stream_is_log = _same_file(self.stream, log) if log else False
        self.journal = "INVOCATION_ID" in os.environ
        if self.journal:
            syslog.openlog(f"sglang-pve-{tool}", 0, syslog.LOG_DAEMON)

    def __call__(self, text: str, error: bool = False) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        lines = "".join(f"[{stamp} sglang-pve {self.tool}] {part}\n" for part in text.splitlines() or [""])
        lead = "" if not self.log or _at_line_start(self.log) else "\n"
        try:
            self.stream.write((lead if self.stream_is_log else "") + lines)
            self.stream.flush()
        except (OSError, ValueError):
            pass
        if self.log and not self.stream_is_log:
            try:
                with open(self.log, "a", encoding="utf-8") as handle:
                    handle.write(lead + lines)
            except OSError:
                pass
        if self.journal:
            syslog.syslog(syslog.LOG_ERR if error else syslog.LOG_INFO, text)


def _at_line_start(path: str) -> bool:
    """The file is empty or ends with a line break (no half-drawn tqdm bar at its end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return True
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) in (b"\n", b"\r")
    except OSError:
        return True


def _same_file(stream: TextIO, path: str) -> bool:
    try:
        mine = os.fstat(stream.fileno())
        theirs = os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
