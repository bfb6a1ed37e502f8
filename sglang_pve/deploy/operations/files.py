"""Files: many whole files compared with one fact (`file_set`, optionally with a marked block in a
file someone else owns, in the same read), and such a block alone (`block`, read and edited on the
host); written atomically, diffed under --diff."""

import hashlib
import secrets
import shlex
from dataclasses import dataclass
from io import BytesIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, OperationError, StringCommand, operation
from pyinfra.operations.util.files import generate_color_diff

from sglang_pve.agent import contract
from sglang_pve.config.safe import printable
from sglang_pve.deploy.facts.files import (
    NOT_A_FILE,
    FileDigests,
    FilesAndBlock,
    FileState,
    FileText,
    MarkedBlock,
    RcBlock,
    rc_block_command,
)


@dataclass(frozen=True)
class ManagedFile:
    path: str
    content: str | bytes
    mode: str = "644"
    user: str = "root"
    group: str = "root"
    secret: bool = False  # never read back, never diffed: --diff says that it changed, not how
    known_sha1: str | None = None  # a secret file whose content stays on the host (a release's): its sha1

    @property
    def data(self) -> bytes:
        return self.content.encode() if isinstance(self.content, str) else self.content

    @property
    def sha1(self) -> str:
        return self.known_sha1 or hashlib.sha1(self.data).hexdigest()

    @property
    def sha256(self) -> str:  # what release records use
        return hashlib.sha256(self.data).hexdigest()

    def differs(self, current: FileState | None) -> bool:
        return current is None or current.sha1 != self.sha1

    def needs_write(self, current: FileState | None) -> bool:
        owner = (self.mode, self.user, self.group)
        return self.differs(current) or (current is not None and owner != (current.mode, current.user, current.group))


@dataclass(frozen=True)
class ManagedBlock:
    """A marked block in a text file someone else owns (see `block` for what each field means)."""

    path: str
    marker: str
    body: str
    user: str = "root"
    shown: str | None = None

    def fact_args(self) -> dict:  # RcBlock's (and FilesAndBlock's block=) arguments
        return {"path": self.path, "marker": self.marker, "owner": self.user, "shown": self.shown}


def show_diff(file: ManagedFile, current: FileState | None, old_text: str | None = None) -> None:
    """Log a unified diff the way pyinfra's files.put does under --diff. Binary files get a note."""
    if file.secret:
        host.log(
            f"Will {'create' if current is None else 'replace'} {file.path} (holds secrets: content not shown)",
            logger.info,
        )
        return
    if current == NOT_A_FILE:
        host.log(
            f"Will replace {file.path}: a link or not a regular file (whatever it points to stays untouched)",
            logger.info,
        )
        return
    if isinstance(file.content, bytes):
        host.log(f"Will {'create' if current is None else 'replace'} {file.path} (binary, sha1 {file.sha1[:12]})")
        return
    if current is not None and old_text is None:
        old_text = host.get_fact(FileText, path=file.path).text
    host.log(f"Will {'create' if current is None else 'modify'} {file.path}", logger.info)
    # the host's text: each line escaped (its own newline kept) before the diff colours it
    old_lines = [printable(line.removesuffix("\n")) + "\n" for line in (old_text or "").splitlines(keepends=True)]
    if old_text and not old_text.endswith("\n"):
        old_lines[-1] = old_lines[-1].removesuffix("\n")
    for line in generate_color_diff(old_lines, file.content.splitlines(keepends=True)):
        logger.info("  %s", line)
    logger.info("")


# Uploads land here first (root-only), under a random name: never beside the target, where a user
# who can write that directory could have planted a link at a predictable name.
STAGING_DIR = f"{contract.STATE_DIR}/staging"
_TEMP = '"$(dirname -- "$t")/.sglang-pve.XXXXXXXXXX"'  # mktemp: created exclusively (O_EXCL), random


def _install_script(file: ManagedFile, staged: str) -> str:
    """Shell that puts the staged content at file.path, as root in a root-owned directory only: a
    fresh temporary file made by mktemp in the target's directory, owner set without dereferencing
    (chown -h), mode set on that file (never on a link), then renamed over the target (mv -T: a link
    or directory there is replaced or refused, never followed). A user's file: see `block`."""
    target, source = shlex.quote(file.path), shlex.quote(staged)
    return (
        f'set -e; t={target}; s={source}; d=$(dirname -- "$t"); trap \'rm -f -- "$s"\' EXIT; mkdir -p -- "$d"; '
        'if [ "$(stat -c %u -- "$d")" != 0 ]; then '
        'echo "sglang-pve: refusing to write $t as root: $d belongs to another user" >&2; exit 1; fi; '
        f'tmp=$(mktemp -- {_TEMP}); trap \'rm -f -- "$s" "$tmp"\' EXIT; cat -- "$s" > "$tmp"; '
        f'chown -h {file.user}:{file.group} -- "$tmp"; chmod {file.mode} -- "$tmp"; mv -f -T -- "$tmp" "$t"'
    )


def write_commands(file: ManagedFile):
    """Commands that make one file right, content, owner and mode at once: upload to a root-only
    staging file, then install it atomically (readers never see a half-written file)."""
    staged = f"{STAGING_DIR}/{secrets.token_hex(12)}"
    yield StringCommand("install", "-d", "-m", "700", "-o", "root", "-g", "root", STAGING_DIR)
    yield FileUploadCommand(BytesIO(file.data), staged)
    yield StringCommand(_install_script(file, staged))


def changed_files(files: list[ManagedFile], states: dict[str, FileState | None]) -> list[ManagedFile]:
    return [f for f in files if f.needs_write(states.get(f.path))]


@dataclass(frozen=True)
class BlockEdit:
    """What `block` (or `file_set`'s block) changes: the command, and the diff --diff shows."""

    where: str  # the path, or "PATH (a link to TARGET)"
    wanted: ManagedBlock
    found: MarkedBlock
    command: StringCommand | None  # None: the block is up to date

    def show_diff(self) -> None:
        marker = self.wanted.marker
        host.log(f"Will {'modify' if self.found.exists else 'create'} the {marker} block in {self.where}", logger.info)
        old = [
            f"{printable(line)}\n" if line is not None else "(a line not written by sglang-pve: not shown)\n"
            for line in self.found.body
        ]
        for line in generate_color_diff(old, self.wanted.body.splitlines(keepends=True)):
            logger.info("  %s", line)
        logger.info("")


def _block_edit(wanted: ManagedBlock, found: MarkedBlock) -> BlockEdit:
    """The edit that makes `found` hold `wanted` (its command None: it does already), or the
    refusal (OperationError) of a file that must not be edited."""
    path, marker, user = wanted.path, wanted.marker, wanted.user
    where = path if found.path == path else f"{path} (a link to {found.path})"
    if found.state == NOT_A_FILE:
        raise OperationError(
            f"{where} is not a regular file: refusing to edit it. Fix: make it a file, or point shell_rc elsewhere"
        )
    if found.state is not None and found.state.user != user:
        raise OperationError(
            f"{where} belongs to {found.state.user}, not {user}: refusing to edit it (a link planted towards "
            f"someone else's file reads the same). Fix: chown it to {user}, or set shell_rc to a file of {user}"
        )
    if found.markers == "damaged":
        raise OperationError(
            f"{where}: the sglang-pve {marker} block markers are damaged (begin lines {list(found.begin)}, end "
            f"lines {list(found.end)}); repair or delete them by hand, then deploy again"
        )
    if found.markers == "block" and found.sha1 == hashlib.sha1(wanted.body.encode()).hexdigest():
        return BlockEdit(where, wanted, found, None)
    request = {"action": "write", "path": path, "marker": marker, "body": wanted.body, "expect": found.path}
    edit = rc_block_command(request)
    command = StringCommand(edit if user == "root" else f"runuser -u {shlex.quote(user)} -- {edit}")
    return BlockEdit(where, wanted, found, command)


def converge(files: list[ManagedFile], states: dict[str, FileState | None], then: BlockEdit | None = None):
    """Shared by every operation that manages files: diff (when asked) and write what differs, then
    `then`'s block edit (one that changes something). All diffs come before the first command:
    pyinfra's --dry stops a generator at its first yield."""
    changed = changed_files(files, states)
    if state.config.DIFF:
        for file in changed:
            if file.differs(states.get(file.path)):
                show_diff(file, states.get(file.path))
        if then is not None:
            then.show_diff()
    for file in changed:
        yield from write_commands(file)
    if then is not None:
        yield then.command


@operation()
def file_set(files: list[ManagedFile], block: ManagedBlock | None = None, then: list[str] | None = None):
    """
    Make a set of files match exactly, checking all of them with one remote command; with `block`,
    also one marked block in a file someone else owns (as `block` does it), read in the same command:
    the places of one concept (the NCCL profile's files and its shell rc block) cost one read.

    + files: list of ManagedFile(path, content, mode, user, group)
    + block: a ManagedBlock(path, marker, body, user, shown), or None
    + then: shell commands (quoted already) run after a file of the set was written, none otherwise

    A block that cannot be edited (not a file, another user's, damaged markers) is refused before
    any file is written.

    **Example:**

    .. code:: python

        file_set(
            name="NCCL profile files",
            files=[ManagedFile("/etc/nccl.conf", "NCCL_PROTO=LL\\n")],
            block=ManagedBlock("/root/.zshrc", "nccl-profile", "export NCCL_PROTO=LL\\n"),
        )
    """
    paths, edit = [f.path for f in files], None
    if block is None:
        states = host.get_fact(FileDigests, paths=paths)
    else:
        states, found = host.get_fact(FilesAndBlock, paths=paths, block=block.fact_args())
        edit = _block_edit(block, found)  # a refusal comes before any file is written
        edit = edit if edit.command is not None else None
    changed = changed_files(files, states)
    if not changed and edit is None:
        host.noop(f"{len(files)} file(s)" + (f" and the {block.marker} block" if block else "") + " up to date")
        return
    yield from converge(files, states, then=edit)
    if changed:
        for command in then or ():
            yield StringCommand(command)


@operation()
def block(path: str, marker: str, body: str, user: str = "root", shown: str | None = None):
    """
    Keep one marked block in a text file; every other byte of the file stays as it is, and on the host:
    one fact (RcBlock) brings back only the block's digest and markers, the edit runs there
    (sglang_pve/agent/rc_block.py), so the user's other lines (their secrets) never reach the controller.

    + path: the file (created if missing, owned by user)
    + marker: names the block, so several tools' blocks can live in one file
    + body: the block's lines, each ending in a newline
    + user: whose file it is; a non-root user's file is edited by that user (runuser), so a link
      planted in their directory reaches nothing they could not write anyway
    + shown: a regex (Python, whole line) of the lines this toolkit writes into the block: --diff
      shows the old block's lines of that shape, and "(a line not written by sglang-pve: not shown)"
      for any other; None: none shown

    A symlinked file (dotfiles) is edited in its target, the link kept, when the target belongs to
    `user`; anything else (a link towards another user's file, a directory) is refused, saying why.
    pyinfra's own files.block (pyinfra 3.10.0 pyinfra/operations/files.py block) is not used: its
    Block fact's awk sends every line after a begin marker without its end, its markers are regexes,
    and its mv/chown follow a link at the path.

    **Example:**

    .. code:: python

        block(path="/root/.zshrc", marker="nccl-profile", body="export NCCL_PROTO=LL\\n")
    """
    wanted = ManagedBlock(path, marker, body, user, shown)
    edit = _block_edit(wanted, host.get_fact(RcBlock, **wanted.fact_args()))
    if edit.command is None:
        host.noop(f"{marker} block in {edit.where} is up to date")
        return
    if state.config.DIFF:
        edit.show_diff()
    yield edit.command
