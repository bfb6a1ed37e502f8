"""Several facts' commands as one remote command, each part's output handed to its own parser:
one SSH round trip where a host would pay one per fact (pyinfra 3 caches no fact either)."""

import shlex
from collections.abc import Iterable

PART = "--- sglang-pve fact part"
MISSING = "##sglang-pve missing command##"  # a part whose command is not on the host (pyinfra: requires_command)


def joined(commands: Iterable[str]) -> str:
    """The parts in order, each followed by nothing of the others': a marker line between two."""
    return f"; echo '{PART}'; ".join(commands)


def requiring(program: str, command: str) -> str:
    """`command` where `program` exists, else the MISSING line (as pyinfra's requires_command does)."""
    return f"if command -v {shlex.quote(program)} >/dev/null 2>&1; then ( {command} ); else echo '{MISSING}'; fi"


def split(output: list[str], count: int) -> list[list[str] | None]:
    """Each part's lines (`count` of them); None for a part whose command was missing."""
    parts: list[list[str]] = [[]]
    for line in output:
        if line == PART:
            parts.append([])
        else:
            parts[-1].append(line)
    parts += [[] for _ in range(count - len(parts))]
    return [None if part == [MISSING] else part for part in parts[:count]]


def split_last(output: list[str]) -> tuple[list[str], list[str] | None]:
    """(everything before the last part, the last part; None where its command was missing): a
    batch whose first part is itself a batch (its markers stay with it)."""
    marks = [i for i, line in enumerate(output) if line == PART]
    if not marks:
        return output, []
    head, tail = output[: marks[-1]], output[marks[-1] + 1 :]
    return head, None if tail == [MISSING] else tail
