"""Safe alphabets for strings that end up in units, env files, shell rcs, Python hooks and commands.

Checked where input enters (every model field uses these types), so a value can never add a
line, a directive or code; templates still escape on the way out (sglang_pve.deploy.escape).

    Text                     any printable text: no control characters (C0, DEL, C1, U+2028/9)
    Name                     [A-Za-z0-9][A-Za-z0-9_.-]*: profile names, served model names
    HostPath                 an absolute path in [A-Za-z0-9_.,+@=:/-]: venv dirs, the shell rc
    ModelRef                 a HostPath or a Hugging Face id (org/name) in the same alphabet
    ASCII digits only: Python's int() and str.isdigit() accept "٣" and "３"; these never do.

printable() escapes the same control characters in strings from a host (log and command lines)
on their way to the terminal: the one alphabet for refusing and for escaping.
"""

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
DIGITS = re.compile(r"[0-9]+")
MAX_TEXT = 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PATH = re.compile(r"/[A-Za-z0-9_.,+@=:/-]{0,1023}")
_REF = re.compile(r"[A-Za-z0-9_.,+@=:/-]{1,1024}")


def control_characters(value: str) -> str | None:
    """Why `value` is refused as text, or None: '\\n' and friends could add a line anywhere."""
    found = CONTROL.search(value)
    if found:
        return f"contains the control character {found.group()!r} at position {found.start()}"
    if len(value) > MAX_TEXT:
        return f"is {len(value)} characters long (at most {MAX_TEXT})"
    return None


def printable(text: str) -> str:
    """`text` with every control character written as an escape: strings from a host (log lines,
    command lines) or from input can neither move the cursor nor forge a line of our output.

    printable("ok\x1b[2J\n") -> 'ok\\x1b[2J\\n'
    """
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _text(value: str) -> str:
    why = control_characters(value)
    if why:
        raise ValueError(why)
    return value


def _matching(pattern: re.Pattern[str], what: str, path: bool = False) -> Callable[[str], str]:
    def check(value: str) -> str:
        _text(value)
        if not pattern.fullmatch(value):
            raise ValueError(f"not {what}: use only {pattern.pattern}")
        if path and ".." in value.split("/"):
            raise ValueError(f"not {what}: no '..' components")
        return value

    return check


def ascii_digits(value: str) -> bool:
    return bool(DIGITS.fullmatch(value))


Text = Annotated[str, AfterValidator(_text)]
Name = Annotated[str, AfterValidator(_matching(_NAME, "a name (1-64 ASCII letters, digits, _ . -)"))]
HostPath = Annotated[str, AfterValidator(_matching(_PATH, "an absolute path in a safe alphabet", path=True))]
ModelRef = Annotated[
    str, AfterValidator(_matching(_REF, "a path or Hugging Face id in a safe alphabet", path=True)), Field(min_length=1)
]
