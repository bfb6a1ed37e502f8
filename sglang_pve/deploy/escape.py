"""Escaping where values leave: systemd unit syntax (the template filters of sglang_pve.deploy.render).

Values are validated where they enter (sglang_pve.config.safe: no control characters), so these
only have to keep quotes, backslashes, `%` specifiers and `$` variables literal:

    systemd_word("/opt/a b/python")          -> '"/opt/a b/python"'      one ExecStart= word
    systemd_word("/opt/sglang/bin/python")   -> '/opt/sglang/bin/python' (safe words stay bare)
    systemd_word("100%$HOME")                -> '"100%%$$HOME"'          no specifier, no variable
    systemd_env("A", 'x "y" 5%')             -> '"A=x \\"y\\" 5%%"'      one Environment= assignment
    systemd_text("50% off")                  -> '50%% off'               Description= and friends
    printable("ok\x1b[2J\n")                 -> 'ok\\x1b[2J\\n'           host strings on the terminal
"""

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape: strings from a host (log lines,
    command lines) or from input can neither move the cursor nor forge a line of our output."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


_BARE = re.compile(r"[A-Za-z0-9_./:+@,=-]+")  # needs no quotes in a unit: left bare, for readability


def _quoted(text: str) -> str:
    if _BARE.fullmatch(text):
        return text
    # systemd unquotes C-style inside double quotes: \\ and \" are the only escapes we need
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_text(text: str) -> str:
    """A value systemd takes verbatim except for %-specifiers (Description=, Documentation=)."""
    return text.replace("%", "%%")


def systemd_word(word: str) -> str:
    """One word of ExecStart=/ExecStartPre=: specifiers and $VAR/${VAR} expansion are suppressed."""
    return _quoted(systemd_text(word).replace("$", "$$"))


def systemd_env(name: str, value: str) -> str:
    """One assignment of Environment= (systemd does not expand $ there, only %-specifiers)."""
    return _quoted(systemd_text(f"{name}={value}"))
