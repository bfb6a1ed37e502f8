"""Safe alphabets for strings that end up in units, env files, shell rcs, Python hooks and commands.

Checked where input enters (every model field uses these types), so a value can never add a
line, a directive or code; templates still escape on the way out (sglang_pve.deploy.escape).

    Text                     any printable text: no control or format characters (C0, DEL, C1,
                             U+2028/9, and Unicode's Cc/Cf/Cs/Zl/Zp: bidi controls U+202A-202E,
                             U+2066-2069, U+200E/F, U+061C, zero-width characters)
    Name                     [A-Za-z0-9][A-Za-z0-9_.-]*: profile names, served model names
    HostPath                 an absolute path in [A-Za-z0-9_.,+@=:/-], never / itself, no // and
                             no . or .. components: venv dirs, the shell rc
    MountPath                a HostPath without , = : (separators of pct's property strings and
                             lxc.mount.entry's fields): a container's bind mounts
    ModelRef                 a HostPath or a Hugging Face id (org/name) in the same alphabet
    ASCII digits only: Python's int() and str.isdigit() accept "٣" and "３"; these never do.

printable() escapes the same characters in strings from a host (log and command lines, release
records, benchmark diagnoses, probe output) on their way to the terminal: the one alphabet for
refusing and for escaping. A bidi override (U+202E) would make a terminal show text in another
order than it is (CVE-2021-42574, "Trojan Source"), so it is escaped like ESC.
"""

import re
import unicodedata
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field

_NOT_ASCII_PRINTABLE = re.compile(r"[^\x20-\x7e]")  # the fast path: only these are looked up
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # control, format (bidi, zero-width), surrogate, separators
DIGITS = re.compile(r"[0-9]+")
MAX_TEXT = 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PATH = re.compile(r"/[A-Za-z0-9_.,+@=:/-]{0,1023}")
_MOUNT = re.compile(r"/[A-Za-z0-9_.+@/-]{0,1023}")
_REF = re.compile(r"[A-Za-z0-9_.,+@=:/-]{1,1024}")


def _unsafe(character: str) -> bool:
    return unicodedata.category(character) in _UNSAFE_CATEGORIES


def _first_unsafe(value: str) -> tuple[int, str] | None:
    for found in _NOT_ASCII_PRINTABLE.finditer(value):
        if _unsafe(found.group()):
            return found.start(), found.group()
    return None


def control_characters(value: str) -> str | None:
    """Why `value` is refused as text, or None: '\\n' and friends could add a line anywhere, a bidi
    override reorders what a terminal shows."""
    found = _first_unsafe(value)
    if found:
        return f"contains the control character {found[1]!r} at position {found[0]}"
    if len(value) > MAX_TEXT:
        return f"is {len(value)} characters long (at most {MAX_TEXT})"
    return None


def printable(text: str) -> str:
    """`text` with every control character written as an escape: strings from a host (log lines,
    command lines) or from input can neither move the cursor nor forge a line of our output.

    printable("ok\x1b[2J\n") -> 'ok\\x1b[2J\\n'
    printable("a\u202eb") -> 'a\\u202eb'
    """
    return _NOT_ASCII_PRINTABLE.sub(lambda m: _escaped(m.group()), text)


def _escaped(character: str) -> str:
    return repr(character)[1:-1] if _unsafe(character) else character


def printable_tree(value: object) -> object:
    """JSON from a host (a status record, a benchmark or probe result) with every string in it,
    keys included, through printable(): for output that formats many of its fields."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(v) for v in value]
    return value


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
        if path and value.startswith("/") and (value == "/" or "//" in value or "." in value.split("/")):
            raise ValueError(f"not {what}: not / itself, no // and no . components")
        return value

    return check


def ascii_digits(value: str) -> bool:
    return bool(DIGITS.fullmatch(value))


Text = Annotated[str, AfterValidator(_text)]
Name = Annotated[str, AfterValidator(_matching(_NAME, "a name (1-64 ASCII letters, digits, _ . -)"))]
HostPath = Annotated[str, AfterValidator(_matching(_PATH, "an absolute path in a safe alphabet", path=True))]
MountPath = Annotated[
    str, AfterValidator(_matching(_MOUNT, "a mount path in a safe alphabet (absolute, without , = :)", path=True))
]
ModelRef = Annotated[
    str, AfterValidator(_matching(_REF, "a path or Hugging Face id in a safe alphabet", path=True)), Field(min_length=1)
]
