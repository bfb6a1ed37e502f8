"""The agent's own messages: `[2026-07-20 10:00:00 sglang-pve gate] phase weights -> kv_cache (312 s)`.

The unit's `StandardOutput=append:/var/log/sglang/NAME.log` applies to every Exec line, so what
prestart, gate and poststop print lands in the server log, which the gate and the watchdog follow.
The `sglang-pve <tool>` tag marks those lines; `is_own()` lets the followers ignore them, so the
agent's own words never count as the server's progress. Under systemd (INVOCATION_ID set) each
message also goes to the journal through syslog, so `journalctl -u sglang-NAME` shows it.
"""

import os
import re
import sys
import syslog
import time

_OWN = re.compile(r"^\[[^\]]* sglang-pve [a-z]+\] ")


def is_own(text: str) -> bool:
    return bool(_OWN.match(text))


class Reporter:
    """say(text): one tagged line to `stream`, to `log` too unless `stream` already is that
    file (as it is under the unit), and to the journal when running under systemd."""

    def __init__(self, tool: str, stream=None, log: str | None = None):
        self.tool = tool
        self.stream = stream if stream is not None else sys.stdout
        self.log = log if log and not _same_file(self.stream, log) else None
        self.journal = "INVOCATION_ID" in os.environ
        if self.journal:
            syslog.openlog(f"sglang-pve-{tool}", 0, syslog.LOG_DAEMON)

    def __call__(self, text: str, error: bool = False) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        lines = [f"[{stamp} sglang-pve {self.tool}] {part}\n" for part in text.splitlines() or [""]]
        try:
            self.stream.write("".join(lines))
            self.stream.flush()
        except (OSError, ValueError):
            pass
        if self.log:
            try:
                with open(self.log, "a", encoding="utf-8") as handle:
                    handle.write("".join(lines))
            except OSError:
                pass
        if self.journal:
            syslog.syslog(syslog.LOG_ERR if error else syslog.LOG_INFO, text)


def _same_file(stream, path: str) -> bool:
    try:
        mine = os.fstat(stream.fileno())
        theirs = os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
