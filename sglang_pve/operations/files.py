"""Files: many whole files compared with one fact (`file_set`), and a marked block inside a file
someone else owns (`block`); written atomically, diffed under --diff."""

import hashlib
import posixpath
from dataclasses import dataclass
from io import BytesIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, OperationError, QuoteString, StringCommand, operation
from pyinfra.operations.util.files import generate_color_diff

from ..facts.files import FileDigests, FileState, FileText


@dataclass(frozen=True)
class ManagedFile:
    path: str
    content: str | bytes
    mode: str = "644"
    user: str = "root"
    group: str = "root"

    @property
    def data(self) -> bytes:
        return self.content.encode() if isinstance(self.content, str) else self.content

    @property
    def sha1(self) -> str:
        return hashlib.sha1(self.data).hexdigest()

    def differs(self, current: FileState | None) -> bool:
        return current is None or current.sha1 != self.sha1

    def needs_write(self, current: FileState | None) -> bool:
        owner = (self.mode, self.user, self.group)
        return self.differs(current) or owner != (current.mode, current.user, current.group)


def show_diff(file: ManagedFile, current: FileState | None, old_text: str | None = None) -> None:
    """Log a unified diff the way pyinfra's files.put does under --diff. Binary files get a note."""
    if isinstance(file.content, bytes):
        host.log(f"Will {'create' if current is None else 'replace'} {file.path} (binary, sha1 {file.sha1[:12]})")
        return
    if current is not None and old_text is None:
        found = host.get_fact(FileText, path=file.path)
        old_text = found.text if found else ""
    host.log(f"Will {'create' if current is None else 'modify'} {file.path}", logger.info)
    old_lines = (old_text or "").splitlines(keepends=True)
    for line in generate_color_diff(old_lines, file.content.splitlines(keepends=True)):
        logger.info("  %s", line)
    logger.info("")


def write_commands(file: ManagedFile, current: FileState | None):
    """Commands that make one file right: upload beside it, set owner and mode, rename into place
    (readers never see a half-written file), or only fix owner/mode when the content is right."""
    target = QuoteString(file.path)
    if not file.differs(current):
        yield StringCommand("chown", f"{file.user}:{file.group}", target, "&&", "chmod", file.mode, target)
        return
    temp = f"{file.path}.sglang-pve-new"
    yield StringCommand("mkdir", "-p", QuoteString(posixpath.dirname(file.path)))
    yield FileUploadCommand(BytesIO(file.data), temp)
    yield StringCommand(
        "chown", f"{file.user}:{file.group}", QuoteString(temp), "&&", "chmod", file.mode, QuoteString(temp),
        "&&", "mv", "-f", QuoteString(temp), target,
    )


def changed_files(files: list[ManagedFile], states: dict[str, FileState | None]) -> list[ManagedFile]:
    return [f for f in files if f.needs_write(states.get(f.path))]


def converge(files: list[ManagedFile], states: dict[str, FileState | None]):
    """Shared by every operation that manages files: diff (when asked) and write what differs.
    All diffs come before the first command: pyinfra's --dry stops a generator at its first yield."""
    changed = changed_files(files, states)
    if state.config.DIFF:
        for file in changed:
            if file.differs(states.get(file.path)):
                show_diff(file, states.get(file.path))
    for file in changed:
        yield from write_commands(file, states.get(file.path))


@operation()
def file_set(files: list[ManagedFile]):
    """
    Make a set of files match exactly, checking all of them with one remote command.

    + files: list of ManagedFile(path, content, mode, user, group)

    **Example:**

    .. code:: python

        file_set(
            name="NCCL profile files",
            files=[ManagedFile("/etc/nccl.conf", "NCCL_PROTO=LL\\n")],
        )
    """
    states = host.get_fact(FileDigests, paths=[f.path for f in files])
    if not changed_files(files, states):
        host.noop(f"{len(files)} file(s) up to date")
        return
    yield from converge(files, states)


BEGIN = "# >>> sglang-pve {marker} >>> (managed block: rewritten on every deploy)"
END = "# <<< sglang-pve {marker} <<<"


def splice(text: str, marker: str, body: str) -> tuple[str, str]:
    """Return (new text, old block body): the block replaced in place, or appended at the end.

    splice("alias ll='ls -l'\\n", "nccl", "export A=1\\n")[0] gives the alias line, a blank line,
    then "# >>> sglang-pve nccl >>> ...", "export A=1", "# <<< sglang-pve nccl <<<".
    """
    begin, end = BEGIN.format(marker=marker), END.format(marker=marker)
    block = f"{begin}\n{body}{end}\n"
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == begin]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\n") == end]
    if not starts and not ends:
        separator = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
        return text + separator + block, ""
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise OperationError(f"the sglang-pve {marker} block markers are damaged (begin lines {starts}, end lines {ends}); "
                             "repair or delete them by hand, then deploy again")
    old = "".join(lines[starts[0] + 1 : ends[0]])
    return "".join(lines[: starts[0]]) + block + "".join(lines[ends[0] + 1 :]), old


@operation()
def block(path: str, marker: str, body: str, user: str = "root", group: str | None = None):
    """
    Keep one marked block in a text file; every other line of the file stays as it is.

    + path: the file (created if missing, owned by user)
    + marker: names the block, so several tools' blocks can live in one file
    + body: the block's lines, each ending in a newline

    Under --diff only the block is shown, never the rest of the user's file (it may hold secrets).

    **Example:**

    .. code:: python

        block(path="/root/.zshrc", marker="nccl-profile", body="export NCCL_PROTO=LL\\n")
    """
    found = host.get_fact(FileText, path=path)
    text = found.text if found else ""
    new_text, old_body = splice(text, marker, body)
    if found and new_text == text:
        host.noop(f"{marker} block in {path} is up to date")
        return
    if state.config.DIFF:
        host.log(f"Will {'modify' if found else 'create'} the {marker} block in {path}", logger.info)
        for line in generate_color_diff(old_body.splitlines(keepends=True), body.splitlines(keepends=True)):
            logger.info("  %s", line)
        logger.info("")
    owner = (found.state.mode, found.state.user, found.state.group) if found else ("644", user, group or user)
    mode, file_user, file_group = owner
    yield from write_commands(ManagedFile(path, new_text, mode, file_user, file_group), found.state if found else None)
