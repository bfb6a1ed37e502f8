"""Files under the spec's state_dir, always written atomically (temp file + rename).

run/NAME.offset      the log size when prestart ran: where this start's lines begin
status/NAME.json     the latest phase and verdict, e.g.
                     {"server": "baseline", "unit": "sglang-baseline.service", "phase": "weights",
                      "phase_since": 1784541600.0, "verdict": "starting (weights)",
                      "updated": 1784541912.3, "watchdog": {"failures": 0, "failing_since": null},
                      "startup_phases": {"launch": 2.1, "dist_init": 40.2, "weights": 301.5},
                      "startup_s": 343.8}   (the gate's seconds per phase of this start, so far)
restarts/NAME.json   the watchdog's restart history (restarts.py)
"""

from __future__ import annotations  # Spec is the type checker's only: the deploy lock's commands never load spec.py

import json
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_pve.agent.spec import Spec

# A JSON object as json.load gives it (the agent's own records, read back and checked where used).
Record = dict[str, Any]


def write_atomic(path: str, text: str | bytes, mode: int = 0o640) -> None:
    """Write `text` (UTF-8) or bytes to a temp file beside `path` with `mode`, fsync it, rename it
    over `path` (a link there is replaced, never followed)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), mode)
            stream.write(text.encode() if isinstance(text, str) else text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException:
        remove(temp)
        raise


def remove(path: str) -> None:
    """`path` gone, if it can be (a missing one, or one that cannot be removed, is left as it is)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def write_json(path: str, data: object, mode: int = 0o640) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode)


def read_json(path: str) -> Record | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_offset(spec: Spec, offset: int) -> None:
    write_atomic(spec.state_file("run", ".offset"), f"{offset}\n")


def read_offset(spec: Spec) -> int | None:
    try:
        with open(spec.state_file("run", ".offset"), encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def read_status(spec: Spec) -> Record:
    return read_json(spec.state_file("status")) or {}


def update_status(spec: Spec, **fields: object) -> Record:
    """Merge `fields` into status/NAME.json; never raises (status is advisory)."""
    record = read_status(spec)
    record.update(fields, server=spec.server, unit=spec.unit, updated=time.time())
    try:
        write_json(spec.state_file("status"), record)
    except OSError:
        pass
    return record
