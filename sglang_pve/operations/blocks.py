"""A marked block inside a file someone else owns (a user's .zshrc): only the block is ours."""

from pyinfra import host, logger, state
from pyinfra.api import OperationError, operation
from pyinfra.operations.util.files import generate_color_diff

from ..facts.files import FileText
from .files import ManagedFile, write_commands

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
