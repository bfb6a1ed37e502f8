"""What the benchmark task costs per configuration beyond the server's own startup and the
measured requests, in the lab.

    python bench/bench_overhead.py [--runs 2] [--configs baseline,eagle3-2step]

Each run is `pyinfra inventory/lab.py tasks/bench.py` (3 prompts x 128 tokens, 1 warm-up). Per
configuration the task records (history.jsonl) overhead_s = its wall time on the controller
(stop of the previous configuration + start + client + result read-back) minus the previous
server's stop (SGLang's drain, the agent's GPU check) minus the gate's startup time of the server
(the agent's startup_s) minus the measured requests (the runs' durations and warm-up latencies):
the SSH round trips, systemd and the agent's prestart, the uploads, the client's python start-up
and reading the result. Reported: median, min, max over runs and configurations, plus the
task's whole wall time against the sum of its configurations' (pyinfra start-up, facts, the
restore of the previous configuration, the report and the chart). The lab must be up and deployed.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.lab.conftest import pyinfra  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--configs", default="baseline,eagle3-2step,eagle3-3step,eagle3-5step")
    args = parser.parse_args()
    results_dir = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    walls = []
    for run in range(args.runs):
        tic = time.monotonic()
        pyinfra(
            "--data",
            f"configs={args.configs}",
            "--data",
            "num_prompts=3",
            "--data",
            "output_len=128",
            "--data",
            "warmup=1",
            "--data",
            f"bench_results_dir={results_dir}",
            deploy="tasks/bench.py",
        )
        walls.append(time.monotonic() - tic)
        print(f"run {run + 1}/{args.runs}: {walls[-1]:.1f}s", flush=True)
    records = [json.loads(line) for line in (results_dir / "history.jsonl").read_text().splitlines()]
    overhead = [r["overhead_s"] for r in records]
    startup = [r["startup"]["total_s"] for r in records]
    switch = [r["startup"]["switch_s"] for r in records]
    stop = [r["startup"]["stop_previous_s"] for r in records]
    measured = [r["single_stream"]["duration_s"] for r in records]
    per_run = len(records) // args.runs

    def line(name: str, values: list) -> str:
        return f"{name:<44} median {statistics.median(values):7.2f}s  min {min(values):7.2f}s  max {max(values):7.2f}s"

    print(f"{args.runs} runs x {per_run} configurations ({args.configs}), lab, simulator")
    print(line("server startup (gate, agent's startup_s)", startup))
    print(line("stop of the previous configuration", stop))
    print(line("start as seen by the controller", switch))
    print(line("single-stream run (3 x 128 tokens)", measured))
    print(line("bench overhead per configuration", overhead))
    task_rest = [
        wall
        - sum(
            r["startup"]["stop_previous_s"] + r["startup"]["total_s"] + r["overhead_s"]
            for r in records[i * per_run : (i + 1) * per_run]
        )
        for i, wall in enumerate(walls)
    ]
    print(line("whole task wall time", walls))
    print(line("  of which outside the configurations' own", task_rest))
    print("(the latter still includes the measured requests and warm-ups, the restore of the previous")
    print(" configuration, pyinfra's start-up and the report)")
    subprocess.run(["rm", "-rf", str(results_dir)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
