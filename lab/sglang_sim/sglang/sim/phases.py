"""Startup phases and how long each one takes in the simulator.

The names are the vocabulary shared with the fault file and the toolkit's readiness gate:
dist_init, weights, kv_cache, draft (speculative configs only), cuda_graph, http, warmup.
Defaults are short (about 3-4 s in all) so the lab stays fast; real Kimi-K2.5 takes minutes
for weights and capture. Precedence: the fault file's `phase_seconds` for this configuration,
then SGLANG_SIM_PHASE_SECONDS ("weights=30,cuda_graph=10"), then DEFAULT_SECONDS.
"""

from typing import Dict, Mapping, Optional

from sglang.sim import env

PHASES = ("dist_init", "weights", "kv_cache", "draft", "cuda_graph", "http", "warmup")

DEFAULT_SECONDS: Dict[str, float] = {
    "dist_init": 0.4,
    "weights": 1.2,
    "kv_cache": 0.2,
    "draft": 0.5,
    "cuda_graph": 0.8,
    "http": 0.1,
    "warmup": 0.4,
}


def parse_phase_seconds(text: str, source: str) -> Dict[str, float]:
    """Parse "phase=seconds,phase=seconds" (SGLANG_SIM_PHASE_SECONDS)."""
    result: Dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        result[name.strip()] = float(value) if sep else float("nan")
    return validate_phase_seconds(result, source)


def validate_phase_seconds(values: Mapping, source: str) -> Dict[str, float]:
    """Check phase names and durations; name the source and the bad entry on error."""
    checked: Dict[str, float] = {}
    for name, value in values.items():
        if name not in PHASES:
            raise ValueError(f"{source}: unknown phase {name!r}; phases are {', '.join(PHASES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{source}: {name} must be a number of seconds >= 0, got {value!r}")
        checked[name] = float(value)
    return checked


def phase_durations(overrides: Optional[Mapping[str, float]] = None) -> Dict[str, float]:
    """Effective duration of every phase."""
    durations = dict(DEFAULT_SECONDS)
    durations.update(parse_phase_seconds(env.PHASE_SECONDS.get(), env.PHASE_SECONDS.name))
    durations.update(overrides or {})
    return durations
