"""Facts about managed files, batched: one remote command for any number of paths."""

import base64
import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase


@dataclass(frozen=True)
class FileState:
    sha1: str
    mode: str  # octal, as stat prints it: "644"
    user: str
    group: str


# A managed path that is a symbolic link (or anything but a regular file) was not put there by us:
# it reads as a file that differs, is never read or followed, and the write replaces the link itself.
NOT_A_FILE = FileState("not a regular file", "", "", "")


def digest_script(paths: list[str]) -> str:
    """Shell that prints `path<TAB>mode<TAB>user<TAB>group<TAB>sha1` per regular file,
    `path<TAB>-` for a missing one and `path<TAB>!` for a link or anything else (never followed)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        f'for p in {quoted}; do if [ -L "$p" ] || {{ [ -e "$p" ] && [ ! -f "$p" ]; }}; then printf \'%s\\t!\\n\' "$p"; '
        'elif [ -f "$p" ]; then '
        'printf \'%s\\t%s\\t\' "$p" "$(stat -c \'%a\t%U\t%G\' "$p")"; sha1sum < "$p" | cut -d\' \' -f1; '
        "else printf '%s\\t-\\n' \"$p\"; fi; done"
    )


def parse_digests(lines: list[str]) -> dict[str, FileState | None]:
    states: dict[str, FileState | None] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) == 5:
            path, mode, user, group, sha1 = fields
            states[path] = FileState(sha1, mode, user, group)
        elif len(fields) == 2 and fields[1] in "-!":
            states[fields[0]] = None if fields[1] == "-" else NOT_A_FILE
    return states


class FileDigests(FactBase[dict]):
    """SHA1, mode and owner of many files at once; None for a missing file.

    host.get_fact(FileDigests, paths=["/etc/sglang/nccl.env", "/etc/nccl.conf"])
    # {"/etc/sglang/nccl.env": FileState(sha1="...", mode="644", user="root", group="root"),
    #  "/etc/nccl.conf": None}
    """

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, paths):
        return digest_script(list(paths))

    def process(self, output):
        return parse_digests(output)


@dataclass(frozen=True)
class TextFile:
    path: str  # where the text lives: the link's target when the asked path is a symlink
    state: FileState | None  # None: nothing there yet; NOT_A_FILE: a link (when not followed), a directory, ...
    text: str | None  # None unless a regular file owned by `owner` (when one is asked for)

    @property
    def exists(self) -> bool:
        return self.state is not None


class FileText(FactBase[TextFile]):
    """One file: where it really is, its digest, mode and owner, and its text.

    host.get_fact(FileText, path="/root/.zshrc")
    # TextFile(path="/root/.zshrc", state=FileState(...), text="...")
    host.get_fact(FileText, path="/home/dev/.zshrc", follow=True, owner="dev")   # a dotfiles link
    # TextFile(path="/home/dev/dotfiles/zshrc", state=FileState(..., user="dev", ...), text="...")

    A symlink is followed only when asked (`follow`), and then its target's mode and owner are
    reported, never the link's own 777. The text is read only from a regular file owned by `owner`,
    so a link planted towards a root-only file never brings that file's content back.
    """

    def command(self, path, follow=False, owner=None):
        start = shlex.quote(path)
        resolve = f"p=$(readlink -m -- {start})" if follow else f"p={start}"
        owned = f' && [ "$(stat -c %U "$p")" = {shlex.quote(owner)} ]' if owner else ""
        # base64 keeps every byte, trailing newlines included; the stat line tells "missing" from "empty"
        return (
            f"{resolve}; printf '%s\\n' \"$p\"; "
            'if [ -L "$p" ] || { [ -e "$p" ] && [ ! -f "$p" ]; }; then echo \'!\'; '
            'elif [ -f "$p" ]; then stat -c \'%a\t%U\t%G\' "$p"; sha1sum < "$p" | cut -d\' \' -f1; '
            f'if true{owned}; then printf text:; base64 -w0 < "$p"; echo; fi; fi'
        )

    def process(self, output):
        path, rest = output[0], output[1:]
        if not rest:
            return TextFile(path, None, None)
        if rest[0] == "!":
            return TextFile(path, NOT_A_FILE, None)
        mode, user, group = rest[0].split("\t")
        encoded = "".join(rest[2:])
        text = base64.b64decode(encoded.removeprefix("text:")).decode() if encoded.startswith("text:") else None
        return TextFile(path, FileState(rest[1], mode, user, group), text)
