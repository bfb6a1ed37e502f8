"""Fault injection, read at each start from the fault file (SGLANG_SIM_FAULTS).

The file maps a server configuration name (the stem of the --config file) to its faults:

    eagle3-2step: {hang: cuda_graph}
    baseline: {wedge_after_ready: true, phase_seconds: {weights: 20}}

Keys: hang (a phase name), crash (context_length), wedge_after_ready, leak_child, phase_seconds.
A missing file means no faults; a malformed one stops the start with a message naming it.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import yaml

from sglang.sim import env
from sglang.sim.phases import PHASES, validate_phase_seconds

CRASH_KINDS = ("context_length",)


WEDGE_DELAY_S = 3.0


@dataclass(frozen=True)
class Faults:
    """The faults injected into one start of one server configuration."""

    hang: Optional[str] = None
    crash: Optional[str] = None
    wedge_after_ready: Optional[float] = None  # seconds healthy after `fired up` before the wedge
    leak_child: bool = False
    phase_seconds: Dict[str, float] = field(default_factory=dict)

    def hangs_at(self, phase: str) -> bool:
        return self.hang == phase


def load_faults(config_name: Optional[str]) -> Faults:
    """Faults for `config_name` from the fault file, or none."""
    path = Path(env.FAULTS_FILE.get())
    if config_name is None or not path.is_file():
        return Faults()
    with path.open() as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of configuration name -> faults")
    entry = data.get(config_name)
    if entry is None:
        return Faults()
    return _parse_entry(entry, f"{path}: {config_name}")


def _parse_entry(entry: object, where: str) -> Faults:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping of fault -> value, got {entry!r}")
    unknown = set(entry) - set(Faults.__dataclass_fields__)
    if unknown:
        raise ValueError(
            f"{where}: unknown fault key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(Faults.__dataclass_fields__)}"
        )
    hang, crash = entry.get("hang"), entry.get("crash")
    if hang is not None and hang not in PHASES:
        raise ValueError(f"{where}: hang must be one of {', '.join(PHASES)}, got {hang!r}")
    if crash is not None and crash not in CRASH_KINDS:
        raise ValueError(f"{where}: crash must be one of {', '.join(CRASH_KINDS)}, got {crash!r}")
    if not isinstance(entry.get("leak_child", False), bool):
        raise ValueError(f"{where}: leak_child must be true or false, got {entry['leak_child']!r}")
    wedge = entry.get("wedge_after_ready", False)
    if not isinstance(wedge, (bool, int, float)) or (not isinstance(wedge, bool) and wedge < 0):
        raise ValueError(f"{where}: wedge_after_ready must be true, false or seconds >= 0, got {wedge!r}")
    seconds = entry.get("phase_seconds") or {}
    if not isinstance(seconds, dict):
        raise ValueError(f"{where}: phase_seconds must map phase -> seconds, got {seconds!r}")
    return Faults(
        hang=hang,
        crash=crash,
        wedge_after_ready=_wedge_delay(wedge),
        leak_child=entry.get("leak_child", False),
        phase_seconds=validate_phase_seconds(seconds, f"{where}: phase_seconds"),
    )


def _wedge_delay(value: object) -> Optional[float]:
    """true: healthy for WEDGE_DELAY_S first (a guess: long enough for a readiness check to pass)."""
    if isinstance(value, bool):
        return WEDGE_DELAY_S if value else None
    return float(value)
