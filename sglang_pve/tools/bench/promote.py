"""tasks/bench.py --data promote=1: the measured winner becomes the host's active configuration.

`decide` judges a run's records by the output tok/s at one concurrency level (promote_by: 1, the
single-stream run and the table's column, by default; or a sweep level): the fastest configuration
is promoted only when its margin over the configuration that ran before the bench exceeds both
runs' noise added, and never from a run with a failed row (a comparison that misses a configuration
is no verdict). The noise of a level is its requests' spread (std_request_output_throughput,
metrics.py: the spread of the repeated requests' own tok/s) times the level: the aggregate at
concurrency C is C streams' rates. The runner then switches to the winner the way tasks/switch.py
does (a release of the files in place, stop -> GPUs free -> start -> gate, the previous release
again when the gate fails: deploy/operations/releases.py switch_to) and, only once its gate passed,
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


def _level(record: dict, concurrency: int) -> dict | None:
    """The record's run at `concurrency` (1: the single-stream run), None when it was not measured."""
    if concurrency == 1:
        return record.get("single_stream")
    return next((run for run in record.get("sweep") or [] if run.get("concurrency") == concurrency), None)


def decide(records: list[dict], current: str | None, concurrency: int = 1) -> Verdict:
    """The configuration to promote over `current` (what ran before the bench), or why none."""
    runs = {r["configuration"]: _level(r, concurrency) for r in records}
    failed = [r for r in records if r["status"] != "ok" or not runs[r["configuration"]]]
    if failed:
        said = "; ".join(f"{r['configuration']}: {r.get('diagnosis') or 'failed'}" for r in failed)
        return Verdict(None, f"a row failed ({said}): a run that misses a configuration is no comparison")
    if current is None:
        return Verdict(None, "nothing ran before the bench: no current configuration to beat (deploy first)")
    if current not in runs:
        return Verdict(None, f"the current configuration {current} was not measured: add it to configs")
    tok_s = {name: float(run["output_throughput"]) for name, run in runs.items() if run}
    noise = {
        name: float(run.get("std_request_output_throughput") or 0.0) * concurrency for name, run in runs.items() if run
    }
    name = max(tok_s, key=tok_s.__getitem__)
    unit = "output tok/s" if concurrency == 1 else f"output tok/s at concurrency {concurrency}"
    if name == current:
        return Verdict(None, f"{current} runs and is the fastest ({tok_s[current]:.1f} {unit})")
    margin, spread = tok_s[name] - tok_s[current], noise[name] + noise[current]
    figures = f"{name} {tok_s[name]:.1f} vs {current} {tok_s[current]:.1f} {unit}: {margin:+.1f}"
    if margin <= spread:
        return Verdict(None, f"{figures}, within the noise {spread:.1f} (both runs' spread)")
    return Verdict(name, f"{figures} beyond the noise {spread:.1f}")


def load(project_dir: Path) -> dict:
    return host_files.load(project_dir, PROMOTED_FILE)


def write(project_dir: Path, host_name: str, verdict: Verdict, run_id: str, promoted: str) -> Path:
    entry = {"active_server": verdict.winner, "promoted": promoted, "run_id": run_id, "why": verdict.why}
    return host_files.set_entry(project_dir, PROMOTED_FILE, _HEADER, host_name, entry)
