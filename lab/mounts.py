"""Mounts the lab leaves on the host (lxcfs, a killed debootstrap's /proc), found in mountinfo."""

import re
from pathlib import Path

from lab.shell import run


def _unescape(field: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash as \ooo octal.

    >>> _unescape(r"/tmp/a\040b")
    '/tmp/a b'
    """
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below ``path`` in this mount namespace, deepest first.

    >>> mounts_under(Path("/proc"))[-1]
    PosixPath('/proc')
    """
    root = path.resolve()
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(_unescape(line.split()[4]))
        if point == root or root in point.parents:
            points.append(point)
    return sorted(set(points), key=lambda p: len(p.parts), reverse=True)


def unmount_under(path: Path) -> None:
    """Lazily unmount everything at or below ``path``, deepest first (works on dead FUSE mounts)."""
    for point in mounts_under(path):
        run(["umount", "--lazy", str(point)])
