"""Whether the stop that is running was asked for (systemctl stop/restart, a Conflicts= switch)
or is the aftermath of the server ending by itself: the one marker file, RUN_DIR/NAME.stopping.

SGLang ends a requested drain by SIGKILLing its own tree, and a crash the same way, so the main
process's exit cannot tell them apart. systemd can: ExecStop= (`agent stop`) runs while the
main process still lives only for a requested stop, and the gate gets SIGTERM only from one;
both `mark` it. ExecStopPost= (`poststop`) `take`s it: a stop without the mark whose main process
did not exit 0 was a crash, and poststop fails the unit for it (the unit sets
SuccessExitStatus=SIGKILL so that a requested stop ends `inactive`, not `failed`). The marker
lives on tmpfs (/run), so a full or read-only state directory cannot turn a stop into a crash.

A second marker, RUN_DIR/NAME.failing, is the watchdog's at its restart cap: it SIGKILLs the
main PID on purpose, so the end looks like a crash but must fail the unit for good, never be
restarted by the crash policy (crashes.py).
"""

import os
from collections.abc import Mapping

from sglang_pve.agent import overrides
from sglang_pve.agent.spec import Spec


def _path(spec: Spec, kind: str = "stopping") -> str:
    return f"{overrides.run_dir()}/{spec.server}.{kind}"


def mark(spec: Spec, kind: str = "stopping") -> bool:
    try:
        os.makedirs(overrides.run_dir(), mode=0o755, exist_ok=True)
        with open(_path(spec, kind), "w", encoding="ascii") as handle:
            handle.write(f"{os.getpid()}\n")
        return True
    except OSError:
        return False


def requested(spec: Spec) -> bool:
    return os.path.exists(_path(spec))


def take(spec: Spec, kind: str = "stopping") -> bool:
    """Was this stop requested (kind "failing": was the unit failed on purpose)? Removes the mark."""
    try:
        os.unlink(_path(spec, kind))
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return True  # exists but cannot be removed: it was marked


def crashed(requested: bool, environ: Mapping[str, str]) -> str | None:
    """Why the main process's end was a crash that systemd would not count as one (None: a
    requested stop, a clean exit, or a unit failing already, e.g. by the gate, whose diagnosis
    says why), from what systemd gives ExecStopPost=: SERVICE_RESULT, EXIT_CODE, EXIT_STATUS."""
    code, status = environ.get("EXIT_CODE"), environ.get("EXIT_STATUS")
    if requested or code is None or environ.get("SERVICE_RESULT", "success") != "success":
        return None
    if code == "exited" and status == "0":
        return None
    return f"the main process ended by itself ({code}, status {status}) without a requested stop"
