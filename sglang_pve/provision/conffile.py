"""Edit the raw lxc.* lines of /etc/pve/lxc/<vmid>.conf, which the API cannot write.

Stdlib only: this file's source runs on the node (python3 -c) with one JSON argument. Only the
current section (above the first ``[snapshot]``/``[pve:pending]`` header: PVE assigns a line to
the section above it) is touched: the given lines are removed, the new ones appended to it,
every other line kept as it was. The file is replaced in one rename (/etc/pve is pmxcfs), and
only if its SHA-1 (the config ``digest`` the API reported) is still the one expected.

>>> edit("arch: amd64\\nlxc.mount.entry: /a a none bind 0 0\\n\\n[snap1]\\narch: amd64\\n",
...      remove=["lxc.mount.entry: /a a none bind 0 0"], add=["lxc.mount.entry: /b b none bind 0 0"])
'arch: amd64\\nlxc.mount.entry: /b b none bind 0 0\\n\\n[snap1]\\narch: amd64\\n'
"""

import hashlib
import json
import os
import sys


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


def main(argv: list[str]) -> int:
    request = json.loads(argv[1])
    path = request["path"]
    with open(path, "rb") as handle:
        raw = handle.read()
    if request.get("digest") and hashlib.sha1(raw).hexdigest() != request["digest"]:
        print(
            f"{path} changed since it was read (digest {request['digest'][:12]}...): "
            "edited by someone else meanwhile; run again to see the new state",
            file=sys.stderr,
        )
        return 3
    new = edit(raw.decode(), request["remove"], request["add"]).encode()
    temp = f"{path}.tmp.{os.getpid()}"
    with open(temp, "wb") as handle:
        handle.write(new)
    os.rename(temp, path)
    print(hashlib.sha1(new).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
