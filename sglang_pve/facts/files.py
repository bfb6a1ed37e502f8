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


def digest_script(paths: list[str]) -> str:
    """Shell that prints `path<TAB>mode<TAB>user<TAB>group<TAB>sha1` per existing file, `path<TAB>-` otherwise."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        f"for p in {quoted}; do if [ -f \"$p\" ]; then "
        "printf '%s\\t%s\\t' \"$p\" \"$(stat -c '%a\t%U\t%G' \"$p\")\"; sha1sum < \"$p\" | cut -d' ' -f1; "
        "else printf '%s\\t-\\n' \"$p\"; fi; done"
    )


def parse_digests(lines: list[str]) -> dict[str, FileState | None]:
    states: dict[str, FileState | None] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) == 5:
            path, mode, user, group, sha1 = fields
            states[path] = FileState(sha1, mode, user, group)
        elif len(fields) == 2 and fields[1] == "-":
            states[fields[0]] = None
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
    state: FileState
    text: str


class FileText(FactBase["TextFile | None"]):
    """A whole file with its digest, mode and owner, or None when it does not exist.

    host.get_fact(FileText, path="/root/.zshrc")  # TextFile(state=FileState(...), text="...")
    """

    def command(self, path):
        quoted = shlex.quote(path)
        # base64 keeps every byte, trailing newlines included; the stat line tells "missing" from "empty"
        return (
            f"if [ -f {quoted} ]; then stat -c '%a\t%U\t%G' {quoted}; sha1sum < {quoted} | cut -d' ' -f1; "
            f"base64 -w0 < {quoted}; echo; fi"
        )

    def process(self, output):
        if len(output) < 2:
            return None
        mode, user, group = output[0].split("\t")
        text = base64.b64decode("".join(output[2:])).decode()
        return TextFile(FileState(output[1], mode, user, group), text)
