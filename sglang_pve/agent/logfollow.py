"""Follow the server log from a byte offset, line by line, where `\\r` also ends a line.

tqdm bars (weight shards, CUDA-graph batches; only TP0 prints them) redraw with `\\r` and reach
`\\n` only when they finish, so a file-based follower must split on both or it sees nothing for
minutes. Any new byte is progress, even an unfinished line: `Update.partial_grew` says so.

    follower = LogFollower("/var/log/sglang/baseline.log", offset=1234)
    update = follower.poll()   # Update(lines=[...complete lines...], partial_grew=True)
"""

import os
import re
from dataclasses import dataclass

_BREAK = re.compile(rb"[\r\n]")
_READ_MAX = 16 << 20  # bytes consumed per poll; the rest comes with the next one
_PARTIAL_MAX = 64 << 10  # an unterminated piece this long is handed out as a line


@dataclass(frozen=True)
class Update:
    lines: list
    partial_grew: bool  # bytes arrived that do not end a line yet (a tqdm bar mid-redraw)

    @property
    def grew(self) -> bool:
        return bool(self.lines) or self.partial_grew


class LogFollower:
    def __init__(self, path: str, offset: int = 0):
        self.path = path
        self.offset = offset  # bytes consumed, the unfinished line included
        self._partial = b""

    def poll(self) -> Update:
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # truncated or replaced: start over
                    self.offset, self._partial = 0, b""
                handle.seek(self.offset)
                data = handle.read(min(size - self.offset, _READ_MAX))
        except FileNotFoundError:
            return Update([], False)
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


def size(path: str) -> int:
    """Current size of the log (0 when it does not exist yet): the offset of the next start."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


# SGLang logs its server_args at start, keys in clear (server_args=ServerArgs(..., api_key='...')):
# whatever leaves the root-only log (status, diagnoses, the gate's summary) has them hidden.
_SECRET_ARG = re.compile(r"\b((?:admin_)?api_key|hf_token|[a-z_]*(?:token|password|secret))=('[^']*'|\"[^\"]*\"|[^\s,)]+)", re.I)


# ...and argparse echoes command-line words it refuses: "unrecognized arguments: --api-key KEY"
_SECRET_FLAG = re.compile(r"(--(?:admin-)?api-key|--hf-token)([ =])(\S+)")


def redact(line: str) -> str:
    """`line` with the values of key=value secrets replaced: api_key='<hidden>', --api-key <hidden>."""
    line = _SECRET_ARG.sub(lambda m: f"{m.group(1)}='<hidden>'" if m.group(2) != "None" else m.group(0), line)
    return _SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}<hidden>", line)


def tail(path: str, count: int = 50, max_bytes: int = 256 << 10) -> list:
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
