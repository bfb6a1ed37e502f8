"""Edit the raw lxc.* lines of a container's config file on its node, which the API cannot write.

Stdlib only: this file's source runs on the node (python3 -c) with one JSON argument:
``{"vmid", "path", "lock", "digest", "remove", "add"}``. It does what PVE's own writers do (pve-container
src/PVE/API2/LXC/Config.pm update_vm), in their order:

1. lock_config: an exclusive flock on ``lock`` (/run/lock/lxc/pve-config-<vmid>.lock, made as
   ``>>`` makes it; /run/lock/lxc made if missing), waiting at most 10 s (exit 5; pve-guest-common
   src/PVE/AbstractConfig.pm lock_config -> lock_config_full($vmid, 10); pve-common
   src/PVE/Tools.pm lock_file_full, run_with_timeout). Every PVE writer of this CT (API, pct,
   vzdump, migration) takes the same lock, so none can write between our read and our rename;
2. load_config + check_lock: a ``lock:`` key in the current section refuses (exit 4), naming it
   (a lock taken after the plan read the config; the plan refuses one it saw);
3. assert_if_modified: the file's SHA-1 must still be ``digest`` (exit 3);
4. file_set_contents (pve-common src/PVE/File.pm): ``<path>.tmp.<pid>`` created O_EXCL, written,
   renamed over the file (one rename: /etc/pve is pmxcfs, which allows rename within itself and
   forces root:www-data 0640 itself, so nothing is chmod'ed or chown'ed).

Only the current section (above the first ``[snapshot]``/``[pve:pending]`` header: PVE assigns a
line to the section above it) is touched: the given lines are removed, the new ones appended to
it, every other line kept as it was.

>>> edit("arch: amd64\\nlxc.mount.entry: /a a none bind 0 0\\n\\n[snap1]\\narch: amd64\\n",
...      remove=["lxc.mount.entry: /a a none bind 0 0"], add=["lxc.mount.entry: /b b none bind 0 0"])
'arch: amd64\\nlxc.mount.entry: /b b none bind 0 0\\n\\n[snap1]\\narch: amd64\\n'
>>> config_lock("arch: amd64\\nlock: backup\\n\\n[snap1]\\nlock: snapshot\\n"), config_lock("arch: amd64\\n")
('backup', None)
"""

import fcntl
import hashlib
import json
import os
import re
import signal
import sys

LOCK_TIMEOUT_S = 10  # AbstractConfig.pm lock_config
DIGEST_CHANGED, LOCKED, LOCK_TIMEOUT = 3, 4, 5


def edit(text: str, remove: list[str], add: list[str]) -> str:
    lines = text.splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    head, tail = lines[:end], lines[end:]
    pending = list(remove)
    kept = []
    for line in head:
        if line.strip() in pending:
            pending.remove(line.strip())
        else:
            kept.append(line)
    blank = len(kept)
    while blank and not kept[blank - 1].strip():
        blank -= 1
    result = kept[:blank] + list(add) + kept[blank:]
    if tail and (not result or result[-1].strip()):
        result.append("")
    return "\n".join(result + tail) + "\n"


def config_lock(text: str) -> str | None:
    """The current section's ``lock:`` value (pve-container Config.pm parse_pct_config)."""
    for line in text.splitlines():
        if line.startswith("["):
            return None
        if m := re.match(r"^lock:\s*(\S+)\s*$", line):
            return m[1]
    return None


def _timeout(signum, frame):
    raise TimeoutError


def lock_config(path: str, timeout: int = LOCK_TIMEOUT_S):
    """PVE::Tools::lock_file_full($path, $timeout, 0): the open handle holding LOCK_EX."""
    try:
        os.mkdir(os.path.dirname(path))  # PVE::LXC::Config: mkdir $lockdir
    except FileExistsError:
        pass
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return handle
    except BlockingIOError:
        print("trying to acquire lock...", file=sys.stderr)
    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(timeout)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
    except TimeoutError:
        handle.close()
        raise TimeoutError(f"can't lock file '{path}' - got timeout") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return handle


def write_atomically(path: str, data: bytes) -> None:
    """PVE::File::file_set_contents: a fresh temp file beside it, renamed over it."""
    temp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.rename(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise


def main(argv: list[str]) -> int:
    request = json.loads(argv[1])
    path = request["path"]
    try:
        held = lock_config(request["lock"], request.get("timeout", LOCK_TIMEOUT_S))
    except TimeoutError as error:
        print(
            f"{error}: another PVE task holds the container's config lock; run again when it is done", file=sys.stderr
        )
        return LOCK_TIMEOUT
    with held:
        with open(path, "rb") as handle:
            raw = handle.read()
        if lock := config_lock(raw.decode()):
            print(
                f"{path}: CT is locked ({lock}): a PVE job ({lock}) owns the container; run again when it is "
                f"done (`pct unlock {request['vmid']}` only if you know that job is gone)",
                file=sys.stderr,
            )
            return LOCKED
        if request.get("digest") and hashlib.sha1(raw).hexdigest() != request["digest"]:
            print(
                f"{path} changed since it was read (digest {request['digest'][:12]}...): "
                "edited by someone else meanwhile; run again to see the new state",
                file=sys.stderr,
            )
            return DIGEST_CHANGED
        new = edit(raw.decode(), request["remove"], request["add"]).encode()
        write_atomically(path, new)
    print(hashlib.sha1(new).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
