"""tasks/bench.py --data promote=1: the measured winner becomes the host's active configuration.

`decide` judges a run's records by the single-stream output tok/s (the table's column): the
fastest configuration is promoted only when its margin over the configuration that ran before the
bench exceeds both runs' noise added (std_request_output_throughput, metrics.py: the spread of
the repeated requests), and never from a run with a failed row (a comparison that misses a
configuration is no verdict). The runner then switches to the winner the way tasks/switch.py does
(a release of the files in place, stop -> GPUs free -> start -> gate, the previous release again
when the gate fails: deploy/operations/releases.py switch_to) and, only once its gate passed,
writes the winner as the host's active_server in group_data/bench_promoted.yml (host_files.py),
so the next deploy keeps it. The user's group_data/all.py is not rewritten:

    # Written by tasks/bench.py --data promote=1 ...
    pve1-sglang:
      active_server: eagle3-2step
      promoted: "2026-12-01T21:30:00Z"
      run_id: 20261201T212500Z-pve1-sglang
      why: "eagle3-2step 94.0 vs baseline 82.5 output tok/s: +11.5 beyond the noise 0.3"
"""

from dataclasses import dataclass
from pathlib import Path

from sglang_pve.tools import host_files

PROMOTED_FILE = host_files.BENCH_PROMOTED
_HEADER = (
    "# Written by tasks/bench.py --data promote=1: each host's promoted active_server, host data above\n"
    "# group_data (sglang_pve/tools/host_files.py). Delete a host's entry to go back to group data's.\n"
)


@dataclass(frozen=True)
class Verdict:
    winner: str | None  # None: nothing to promote (`why` says why)
    why: str


def _tok_s(record: dict) -> float:
    return float(record["single_stream"]["output_throughput"])


def _noise(record: dict) -> float:
    return float(record["single_stream"].get("std_request_output_throughput") or 0.0)


def decide(records: list[dict], current: str | None) -> Verdict:
    """The configuration to promote over `current` (what ran before the bench), or why none."""
    failed = [r for r in records if r["status"] != "ok" or not r.get("single_stream")]
    if failed:
        said = "; ".join(f"{r['configuration']}: {r.get('diagnosis') or 'failed'}" for r in failed)
        return Verdict(None, f"a row failed ({said}): a run that misses a configuration is no comparison")
    measured = {r["configuration"]: r for r in records}
    if current is None:
        return Verdict(None, "nothing ran before the bench: no current configuration to beat (deploy first)")
    if current not in measured:
        return Verdict(None, f"the current configuration {current} was not measured: add it to configs")
    best = max(records, key=_tok_s)
    name, now = best["configuration"], measured[current]
    if name == current:
        return Verdict(None, f"{current} runs and is the fastest ({_tok_s(now):.1f} output tok/s)")
    margin, noise = _tok_s(best) - _tok_s(now), _noise(best) + _noise(now)
    figures = f"{name} {_tok_s(best):.1f} vs {current} {_tok_s(now):.1f} output tok/s: {margin:+.1f}"
    if margin <= noise:
        return Verdict(None, f"{figures}, within the noise {noise:.1f} (both runs' spread)")
    return Verdict(name, f"{figures} beyond the noise {noise:.1f}")


def load(project_dir: Path) -> dict:
    return host_files.load(project_dir, PROMOTED_FILE)


def write(project_dir: Path, host_name: str, verdict: Verdict, run_id: str, promoted: str) -> Path:
    entry = {"active_server": verdict.winner, "promoted": promoted, "run_id": run_id, "why": verdict.why}
    return host_files.set_entry(project_dir, PROMOTED_FILE, _HEADER, host_name, entry)
