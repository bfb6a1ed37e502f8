"""Run host commands; a failure becomes a LabError that names the command and its stderr.

>>> run(["true"]).returncode
0
>>> try:
...     run(["sh", "-c", "echo oops >&2; exit 3"])
... except LabError as error:
...     print(error)
sh -c 'echo oops >&2; exit 3' failed (exit 3): oops
"""

import shlex
import subprocess


class LabError(Exception):
    """Something the lab could not do; the message says what and, where known, how to fix it."""


def run(argv: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with text output captured; raises LabError when ``check`` and it fails."""
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise LabError(f"{shlex.join(argv)} failed (exit {result.returncode}): {result.stderr.strip()}")
    return result
