"""Follow the server log from a byte offset, line by line, where `\\r` also ends a line.

tqdm bars (weight shards, CUDA-graph batches; only TP0 prints them) redraw with `\\r` and reach
`\\n` only when they finish, so a file-based follower must split on both or it sees nothing for
minutes. Any new byte is progress, even an unfinished line: `Update.partial_grew` says so.
Rotation (rename + create, copytruncate) and deletion are survived: see LogFollower.

    follower = LogFollower("/var/log/sglang/baseline.log", offset=1234)
    update = follower.poll()   # Update(lines=[...complete lines...], partial_grew=True)
"""

import os
import re
from dataclasses import dataclass
from typing import BinaryIO

from sglang_pve.agent import overrides

_BREAK = re.compile(rb"[\r\n]")
_READ_MAX = 16 << 20  # bytes consumed per poll; the rest comes with the next one
_PARTIAL_MAX = 64 << 10  # an unterminated piece this long is handed out as a line


@dataclass(frozen=True)
class Update:
    lines: list[str]
    partial_grew: bool  # bytes arrived that do not end a line yet (a tqdm bar mid-redraw)

    @property
    def grew(self) -> bool:
        return bool(self.lines) or self.partial_grew


class LogFollower:
    """Follows the file the server writes, not the name: it keeps a descriptor open, so a log
    rotated by rename (+ create) or deleted is read to its end as the server goes on writing to
    it; a truncated one (logrotate's copytruncate) is read again from its start.

    `source` names a path that opens the very file the server writes, /proc/MAIN/fd/1 (systemd
    opened the log once, for StandardOutput=append:): used when it is the log at `path` when the
    follower starts, so the server's output is followed whatever later happens to the name.
    Without it (or when it is something else) the name is followed like `tail -F`: when it names
    a new file, the old one is read to its end first.
    """

    def __init__(self, path: str, offset: int = 0, source: str | None = None):
        self.path = path
        self.offset = offset  # bytes consumed, the unfinished line included
        self._partial = b""
        self._handle: BinaryIO | None = None
        self._pinned = False  # the descriptor is the server's own output: never switch away
        if source:
            self._pin(source)

    def _pin(self, source: str) -> None:
        try:
            handle = open(source, "rb")  # held for the follower's lifetime
        except OSError:
            return
        try:
            same = _identity(os.fstat(handle.fileno())) == _identity(os.stat(self.path))
        except OSError:
            same = False
        if same:
            self._handle, self._pinned = handle, True
        else:
            handle.close()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def poll(self) -> Update:
        if self._handle is None:
            try:
                self._handle = open(self.path, "rb")
            except FileNotFoundError:
                return Update([], False)
        data = self._read(self._handle)
        if not data and not self._pinned and self._renamed(self._handle):
            self.close()  # read to its end above; the name is a new file now: start it from 0
            self.offset, self._partial = 0, b""
            return self.poll()
        if not data:
            return Update([], False)
        self.offset += len(data)
        pieces = _BREAK.split(self._partial + data)
        self._partial = pieces.pop()
        lines = [piece.decode("utf-8", "replace") for piece in pieces if piece.strip()]
        if len(self._partial) > _PARTIAL_MAX:
            lines.append(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        return Update(lines, bool(self._partial) and not data.endswith((b"\n", b"\r")))

    def _read(self, handle: BinaryIO) -> bytes:
        size = os.fstat(handle.fileno()).st_size
        if size < self.offset:  # truncated in place (copytruncate): start over
            self.offset, self._partial = 0, b""
        handle.seek(self.offset)
        return handle.read(min(size - self.offset, _READ_MAX))

    def _renamed(self, handle: BinaryIO) -> bool:
        try:
            return _identity(os.stat(self.path)) != _identity(os.fstat(handle.fileno()))
        except FileNotFoundError:
            return False  # deleted: keep reading the open file


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def main_output(pid: int | None) -> str | None:
    """The path that opens the server's stdout (its log, whatever its name is now)."""
    return f"{overrides.proc_root()}/{pid}/fd/1" if pid else None


def size(path: str) -> int:
    """Current size of the log (0 when it does not exist yet): the offset of the next start."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


# SGLang logs its server_args at start, keys in clear (server_args=ServerArgs(..., api_key='...')):
# whatever leaves the root-only log (status, diagnoses, the gate's summary) has them hidden.
_SECRET_ARG = re.compile(
    r"\b((?:admin_)?api_key|hf_token|[a-z_]*(?:token|password|secret))=('[^']*'|\"[^\"]*\"|[^\s,)]+)", re.I
)


# ...and argparse echoes command-line words it refuses: "unrecognized arguments: --api-key KEY"
_SECRET_FLAG = re.compile(r"(--(?:admin-)?api-key|--hf-token)([ =])(\S+)")


def redact(line: str) -> str:
    """`line` with the values of key=value secrets replaced: api_key='<hidden>', --api-key <hidden>."""
    line = _SECRET_ARG.sub(lambda m: f"{m.group(1)}='<hidden>'" if m.group(2) != "None" else m.group(0), line)
    return _SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}<hidden>", line)


def tail(path: str, count: int = 50, max_bytes: int = 256 << 10) -> list[str]:
    """The last `count` non-empty lines (split on \\n and \\r) of the last `max_bytes` bytes,
    secrets redacted."""
    try:
        with open(path, "rb") as handle:
            end = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, end - max_bytes))
            data = handle.read(max_bytes)
    except FileNotFoundError:
        return []
    pieces = [piece for piece in _BREAK.split(data) if piece.strip()]
    if end > max_bytes and pieces:
        pieces = pieces[1:]  # the first piece is probably cut
    return [redact(piece.decode("utf-8", "replace")) for piece in pieces[-count:]]
