"""Writing the lab's files: atomically, with their mode from the start (keys, credentials)."""

import os
from pathlib import Path


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` through a temp file created with ``mode`` (never readable by
    others, not even for a moment) and renamed over it; parents are created root-only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.chmod(tmp, mode)
    tmp.replace(path)
