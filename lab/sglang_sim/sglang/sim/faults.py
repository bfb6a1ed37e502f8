"""Fault injection, read at each start from the fault file (SGLANG_SIM_FAULTS).

The file maps a server configuration name (the stem of the --config file) to its faults:

    eagle3-2step: {hang: cuda_graph}
    baseline: {wedge_after_ready: true, phase_seconds: {weights: 20}}

Keys: hang (a phase name), crash (context_length), wedge_after_ready, leak_child, phase_seconds,
and the configuration's speed: decode_tok_s, accept_length (default: perf.SEED_RATES by name);
node_rank: hang, crash, wedge_after_ready and leak_child act only on the node of that
--node-rank (one rank of a multi-node group); version: they act only in a build of that version
(sglang.__version__; one release of a configuration fails while another of the same name, the one
a failed switch reverts to, starts); the durations and speed apply everywhere.
A missing file means no faults; a malformed one stops the start with a message naming it.

A build of the simulator may carry a regression: a module `sglang.sim.regression` whose `FAULTS`
(same keys) apply to every configuration the fault file does not name. The lab builds one
nightly that way (lab/index.py), standing in for a nightly whose change breaks every start.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import yaml

from sglang.sim import env
from sglang.sim.perf import SEED_RATES, DecodeRate
from sglang.sim.phases import PHASES, validate_phase_seconds
from sglang.version import __version__

try:
    from sglang.sim.regression import FAULTS as REGRESSION
except ImportError:
    REGRESSION = None

CRASH_KINDS = ("context_length",)
_NODE_FAULTS = ("hang", "crash", "wedge_after_ready", "leak_child")  # what node_rank and version restrict


WEDGE_DELAY_S = 3.0
FILE_KEYS = (
    "hang",
    "crash",
    "wedge_after_ready",
    "leak_child",
    "phase_seconds",
    "decode_tok_s",
    "accept_length",
    "node_rank",
    "version",
)


@dataclass(frozen=True)
class Faults:
    """The faults injected into one start of one server configuration."""

    hang: Optional[str] = None
    crash: Optional[str] = None
    wedge_after_ready: Optional[float] = None  # seconds healthy after `fired up` before the wedge
    leak_child: bool = False
    phase_seconds: Dict[str, float] = field(default_factory=dict)
    decode_rate: Optional[DecodeRate] = None  # from the file's decode_tok_s / accept_length

    def hangs_at(self, phase: str) -> bool:
        return self.hang == phase


def load_faults(config_name: Optional[str], node_rank: int = 0) -> Faults:
    """Faults for `config_name` (on node `node_rank`) from the fault file, else this build's
    regression, else none."""
    path = Path(env.FAULTS_FILE.get())
    if config_name is None:
        return Faults()
    data = {}
    if path.is_file():
        with path.open() as f:
            data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of configuration name -> faults")
    if data.get(config_name) is None and REGRESSION is not None:
        return _parse_entry(REGRESSION, "sglang.sim.regression", SEED_RATES.get(config_name))
    entry = data.get(config_name) or {}
    if isinstance(entry, dict) and _elsewhere(entry, node_rank):
        entry = {k: v for k, v in entry.items() if k not in _NODE_FAULTS}  # another node's or build's faults
    return _parse_entry(entry, f"{path}: {config_name}", SEED_RATES.get(config_name))


def _elsewhere(entry: dict, node_rank: int) -> bool:
    """The entry's node_rank or version names another node or another build than this one."""
    return entry.get("node_rank", node_rank) != node_rank or entry.get("version", __version__) != __version__


def _decode_rate(entry: dict, where: str, seed: Optional[DecodeRate]) -> Optional[DecodeRate]:
    for key in ("decode_tok_s", "accept_length"):
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1):
            raise ValueError(f"{where}: {key} must be a number >= 1, got {value!r}")
    tok_s = entry.get("decode_tok_s") or (seed.tok_s if seed else None)
    if tok_s is None:
        return None
    return DecodeRate(float(tok_s), entry.get("accept_length") or (seed.accept_length if seed else None))


def _parse_entry(entry: object, where: str, seed: Optional[DecodeRate] = None) -> Faults:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping of fault -> value, got {entry!r}")
    unknown = set(entry) - set(FILE_KEYS)
    if unknown:
        raise ValueError(
            f"{where}: unknown fault key(s) {', '.join(sorted(map(str, unknown)))}; known: {', '.join(FILE_KEYS)}"
        )
    hang, crash = entry.get("hang"), entry.get("crash")
    if hang is not None and hang not in PHASES:
        raise ValueError(f"{where}: hang must be one of {', '.join(PHASES)}, got {hang!r}")
    if crash is not None and crash not in CRASH_KINDS:
        raise ValueError(f"{where}: crash must be one of {', '.join(CRASH_KINDS)}, got {crash!r}")
    if not isinstance(entry.get("node_rank", 0), int) or isinstance(entry.get("node_rank"), bool):
        raise ValueError(f"{where}: node_rank must be an integer, got {entry['node_rank']!r}")
    if not isinstance(entry.get("version", ""), str):
        raise ValueError(f"{where}: version must be a string (a version of sglang), got {entry['version']!r}")
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
        decode_rate=_decode_rate(entry, where, seed),
    )


def _wedge_delay(value: object) -> Optional[float]:
    """true: healthy for WEDGE_DELAY_S first (a guess: long enough for a readiness check to pass)."""
    if isinstance(value, bool):
        return WEDGE_DELAY_S if value else None
    return float(value)
