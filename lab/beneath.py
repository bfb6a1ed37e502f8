"""Paths under a root resolved without following any link: guestd's check for what pve1 names.

guestd runs as root on the lab host; pve1's root writes the node's files (its rootfs, the
backing dir of /etc/pve). A path reached through /proc/<pid>/root follows an absolute symlink
against the *lab host's* root (the kernel's magic link changes the root only for the walk that
crosses it), so `lxc.mount.entry = /x ...` with /x -> /etc on pve1 would bind the lab host's
/etc. Python has no openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); this walks the components
with O_PATH | O_NOFOLLOW from an fd of the root instead, and refuses every link and '..'.
What it checks is the name at that moment: LXC mounts the path later (a race pve1's root could
win only by swapping a checked directory for a link in between; the lab accepts that).

    beneath(Path("/proc/123/root"), "/dev/nvidia0")  # Path("/proc/123/root/dev/nvidia0"), or LinkError
"""

import os
import stat
from pathlib import Path


class LinkError(OSError):
    """A component of the path is a link (or '..'): refused, never followed."""


def beneath(root: Path, path: str, what: str = "path") -> Path:
    """root / path after checking that no component of `path` below `root` is a link; a missing
    component ends the check (there is nothing to follow; the caller says it is missing)."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise LinkError(f"{what} '{path}' contains '..'")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            try:
                child = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                break
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                shown = "/" + "/".join(parts[: index + 1])
                raise LinkError(f"{what} '{path}': '{shown}' is a symbolic link; links on the node are not followed")
    finally:
        os.close(fd)
    return root.joinpath(*parts) if parts else root


def read_beneath(root: Path, path: str, what: str = "file") -> str:
    """The text of root/path, opened without following a link anywhere below `root`."""
    target = beneath(root, path, what)
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd) as file:
        return file.read()
