"""pyinfra's operation order, without reading every caller's source line.

pyinfra orders a host's operations by the line numbers of their call stack (pyinfra 3.10.0
api/util.py get_operation_order_from_stack, called by api/operation.py for every operation on
every host). It takes them from ``inspect.stack()``, which reads one line of source for every
frame (``findsource`` -> ``getmodule``, a walk over sys.modules per frame), and then calls
``getframeinfo`` on each frame again, reading that line once more. Nothing uses the lines: the
order needs each frame's file name and line number. Over 16 containers that was 0.9 s of the
controller's 2.3 s of CPU in a no-change run (bench/FLEET.md).

``operation_order`` is the same function over ``getframeinfo(frame, context=0)``: the same
``inspect`` function gives the same file name and line number (for a call over several lines,
the line its instruction starts on), and reads no source. ``install`` puts it where pyinfra calls
it; tests/unit/test_op_order.py holds it to pyinfra's own result.
"""

import importlib
import sys
from inspect import getframeinfo
from types import FrameType

import pyinfra
from pyinfra.api import util as pyinfra_util

# the module (pyinfra.api's `operation` is its decorator, which shadows the module's name there)
pyinfra_operation = importlib.import_module("pyinfra.api.operation")


def operation_order(state) -> list[int]:
    """pyinfra's get_operation_order_from_stack(state), line for line, minus the source reads."""
    frames = []
    # pyinfra's caller onwards: this function is not pyinfra's, so it is left out
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    infos = [getframeinfo(f, context=0) for f in reversed(frames)]

    start = 0
    if state.current_deploy_filename:  # the first frame of the deploy file being run, from the outermost;
        # none: pyinfra's loop ends on its own frame, which it leaves out, so nothing is counted
        names = [info.filename for info in infos]
        start = names.index(state.current_deploy_filename) if state.current_deploy_filename in names else len(infos)

    line_numbers = [state.current_op_file_number] if pyinfra.is_cli else []
    install_dir = pyinfra_util.PYINFRA_INSTALL_DIR
    return line_numbers + [info.lineno for info in infos[start:] if not info.filename.startswith(install_dir)]


def install() -> None:
    """Where pyinfra 3.10.0 calls it (api/operation.py imports it by name)."""
    setattr(pyinfra_operation, "get_operation_order_from_stack", operation_order)  # noqa: B010 - a module's name
