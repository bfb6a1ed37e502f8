"""The switches' outcomes for the metrics: releases_dir/switch-history (JSON, no .json suffix: the
store's records are the *.json files), written at the end of every switch (switch.py).

    {"counts": {"ready": 4, "reverted": 1, "failed": 0},
     "last": {"release": "20261130T114354Z-3f2a9c1d", "result": "reverted", "time": 1784541600.0,
              "timings": {"stop_s": 2.1, "gpus_free_s": 0.4, "start_s": 61.0, "total_s": 64.2}}}

Counts only grow (Prometheus counters); they start over with a new releases directory.
"""

import os
import time

from sglang_pve.agent import state
from sglang_pve.agent.state import Record

FILE_NAME = "switch-history"
RESULTS = ("ready", "reverted", "failed")


def read(releases_dir: str) -> Record:
    record = state.read_json(os.path.join(releases_dir, FILE_NAME)) or {}
    counts, last = record.get("counts"), record.get("last")
    counts = counts if isinstance(counts, dict) else {}
    return {"counts": {r: int(counts.get(r, 0)) for r in RESULTS}, "last": last if isinstance(last, dict) else None}


def record(releases_dir: str, release_id: str, result: str, timings: dict[str, float]) -> None:
    """Count one switch's `result`; never raises (the history is advisory)."""
    history = read(releases_dir)
    history["counts"][result] += 1
    history["last"] = {"release": release_id, "result": result, "time": time.time(), "timings": dict(timings)}
    try:
        state.write_json(os.path.join(releases_dir, FILE_NAME), history, mode=0o600)
    except OSError:
        pass
