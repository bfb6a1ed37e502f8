"""A marked block in a file someone else owns (a user's shell rc), read and edited ON the host.

Stdlib only: deploy/facts/files.py `RcBlock` and deploy/operations/files.py `block` ship this source
inline (python3 -c, base64, never installed) with one JSON argument. The rest of the file never
leaves the host: users keep secrets in their rc (export HF_TOKEN=...), and pyinfra prints a fact's
output at -vvv (pyinfra 3.10.0 pyinfra_cli/cli.py _set_verbosity -> state.print_fact_output, which
pyinfra/api/facts.py get_fact passes to run_shell_command), and a failing fact's output at any
verbosity (get_fact: print_host_combined_output).

{"action": "read", "path", "marker", "owner", "shown"} prints one JSON object:
    {"path": where the text lives (a link is resolved), "state": "missing" | "not_a_file" | "file",
     "mode", "user", "group" (of a file), "markers": "none" | "block" | "damaged" (only for a file of
     `owner`), "begin"/"end": line numbers of the marker lines, "sha1": of the block's body,
     "body": its lines where they fullmatch the regex `shown` (the shape the toolkit writes), null
     for every other line (so a --diff shows the block's change without any line it did not write)}
{"action": "write", "path", "marker", "body", "expect"} puts `body` between the markers (in place,
    or appended), every other byte of the file kept; `expect` is the resolved path the read saw: a
    link changed since then refuses. Run as the file's owner (runuser) for a user's file.
    Link-safe: every directory of the path opened with O_NOFOLLOW from /, the file read with
    O_NOFOLLOW, a fresh O_EXCL temporary file beside it renamed over it (a link planted there is
    replaced, never followed); as root, only in a root-owned directory.

>>> splice(b"alias ll='ls -l'\\n", "nccl", b"export A=1\\n")[0].decode().splitlines()[-3:]
['# >>> sglang-pve nccl >>> (managed block: rewritten on every deploy)', 'export A=1', '# <<< sglang-pve nccl <<<']
"""

import grp
import hashlib
import json
import os
import pwd
import re
import secrets
import stat
import sys
from collections.abc import Callable, Sequence
from typing import Any

BEGIN = "# >>> sglang-pve {marker} >>> (managed block: rewritten on every deploy)"
END = "# <<< sglang-pve {marker} <<<"


class Refused(Exception):
    """A state this script will not edit: the message says why and what to do."""


def lines_of(data: bytes) -> list[bytes]:
    """Lines split on b"\\n" only, each keeping its newline (the last one may have none)."""
    parts = data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def markers(lines: list[bytes], marker: str) -> tuple[list[int], list[int]]:
    begin, end = BEGIN.format(marker=marker).encode(), END.format(marker=marker).encode()
    starts = [i for i, line in enumerate(lines) if line.removesuffix(b"\n") == begin]
    ends = [i for i, line in enumerate(lines) if line.removesuffix(b"\n") == end]
    return starts, ends


def damaged(starts: list[int], ends: list[int]) -> bool:
    return (bool(starts) or bool(ends)) and (len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0])


def splice(data: bytes, marker: str, body: bytes) -> tuple[bytes, bytes]:
    """(new data, old block body): the block replaced in place, or appended at the end."""
    lines = lines_of(data)
    starts, ends = markers(lines, marker)
    block = f"{BEGIN.format(marker=marker)}\n".encode() + body + f"{END.format(marker=marker)}\n".encode()
    if not starts and not ends:
        separator = b"" if not data else (b"\n" if data.endswith(b"\n") else b"\n\n")
        return data + separator + block, b""
    if damaged(starts, ends):
        raise Refused(
            f"the sglang-pve {marker} block markers are damaged (begin lines {starts}, end lines {ends}); "
            "repair or delete them by hand, then deploy again"
        )
    old = b"".join(lines[starts[0] + 1 : ends[0]])
    return b"".join(lines[: starts[0]]) + block + b"".join(lines[ends[0] + 1 :]), old


def _name(lookup: Callable[[int], Sequence[object]], number: int) -> str:
    try:
        return str(lookup(number)[0])
    except KeyError:
        return str(number)


def read(request: dict[str, Any]) -> dict[str, Any]:
    asked, marker = request["path"], request["marker"]
    path = os.path.realpath(asked)  # a dotfiles link: its target (readlink -m)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"path": path, "state": "missing"}
    if not stat.S_ISREG(info.st_mode):
        return {"path": path, "state": "not_a_file"}
    user = _name(pwd.getpwuid, info.st_uid)
    found: dict[str, Any] = {
        "path": path,
        "state": "file",
        "mode": f"{stat.S_IMODE(info.st_mode):o}",
        "user": user,
        "group": _name(grp.getgrgid, info.st_gid),
    }
    if user != request["owner"]:  # a link planted towards someone else's file: never read
        return found
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # replaced since the lstat
        os.close(descriptor)
        return {"path": path, "state": "not_a_file"}
    with os.fdopen(descriptor, "rb") as handle:
        lines = lines_of(handle.read())
    starts, ends = markers(lines, marker)
    found.update(begin=starts, end=ends)
    if not starts and not ends:
        return found | {"markers": "none"}
    if damaged(starts, ends):
        return found | {"markers": "damaged"}
    body = lines[starts[0] + 1 : ends[0]]
    shown = re.compile(request["shown"]) if request.get("shown") else None
    return found | {
        "markers": "block",
        "sha1": hashlib.sha1(b"".join(body)).hexdigest(),
        "body": [_shown(line, shown) for line in body],
    }


def _shown(line: bytes, shape: "re.Pattern[str] | None") -> str | None:
    try:
        text = line.removesuffix(b"\n").decode()
    except UnicodeDecodeError:
        return None
    return text if shape is not None and shape.fullmatch(text) else None


def _directory(path: str) -> int:
    """An O_NOFOLLOW descriptor of `path`'s directory, walked from / (missing ones made, 755)."""
    descriptor = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    for name in [part for part in os.path.dirname(path).split("/") if part]:
        try:
            os.mkdir(name, 0o755, dir_fd=descriptor)
        except FileExistsError:
            pass
        try:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor)
        except OSError as error:
            os.close(descriptor)
            raise Refused(f"{name} in {path} is a link or not a directory ({error.strerror}): refusing") from None
        os.close(descriptor)
        descriptor = child
    return descriptor


def write(request: dict[str, Any]) -> bool:
    asked, marker, body = request["path"], request["marker"], request["body"].encode()
    path = os.path.realpath(asked)
    if path != request["expect"]:
        raise Refused(f"{asked} now leads to {path}, not {request['expect']}: changed meanwhile; deploy again")
    directory = _directory(path)
    try:
        if os.getuid() == 0 and os.fstat(directory).st_uid != 0:
            raise Refused(f"refusing to write {path} as root: {os.path.dirname(path)} belongs to another user")
        name = os.path.basename(path)
        try:
            descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        except FileNotFoundError:
            old, info = b"", None
        except OSError as error:
            raise Refused(f"{path} is a link or not a regular file ({error.strerror}): refusing to edit it") from None
        else:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                os.close(descriptor)
                raise Refused(f"{path} is not a regular file of uid {os.getuid()}: refusing to edit it")
            with os.fdopen(descriptor, "rb") as handle:
                old = handle.read()
        new, _ = splice(old, marker, body)
        if new == old:
            return False
        temp = f".sglang-pve.{secrets.token_hex(8)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(new)
                if info is not None:
                    try:  # the file's own group, where this user may set it
                        os.fchown(handle.fileno(), info.st_uid, info.st_gid)
                    except PermissionError:
                        pass
                os.fchmod(handle.fileno(), stat.S_IMODE(info.st_mode) if info is not None else 0o644)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=directory)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(directory)
    return True


def main(argv: list[str]) -> int:
    request = json.loads(argv[-1])  # shipped inline, the source comes before it
    try:
        if request["action"] == "read":
            print(json.dumps(read(request)))
        else:
            print("changed" if write(request) else "unchanged")
    except Refused as refused:
        print(f"sglang-pve: {refused}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
