"""Escaping where values leave: systemd unit syntax (the template filters of sglang_pve.deploy.render).

Values are validated where they enter (sglang_pve.config.safe: no control characters), so these
only have to keep quotes, backslashes, `%` specifiers and `$` variables literal:

    systemd_word("/opt/a b/python")          -> '"/opt/a b/python"'      one ExecStart= word
    systemd_word("/opt/sglang/bin/python")   -> '/opt/sglang/bin/python' (safe words stay bare)
    systemd_word("100%$HOME")                -> '"100%%$$HOME"'          no specifier, no variable
    systemd_env("A", 'x "y" 5%')             -> '"A=x \\"y\\" 5%%"'      one Environment= assignment
    systemd_text("50% off")                  -> '50%% off'               Description= and friends

Host strings shown on the terminal go through sglang_pve.config.safe.printable (the same alphabet
the model refuses on input).
"""

import re

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
