"""Cost of a no-change run of the full deploy on one lab host: remote commands and wall time.

    python bench/no_change_deploy.py [--runs 7] [--interactive]

Converges the lab host once, then runs the deploy `--runs` times with nothing to change and
reports the remote commands of each run (pyinfra --debug logs one "Running command on" line per
remote exec, facts included) and the median wall time. `--interactive` measures the default
two-pass run (prepare + execute) instead of `-y`. The lab must be up (python -m lab up).
"""

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PYINFRA = PROJECT / ".venv" / "bin" / "pyinfra"


def deploy(interactive: bool) -> tuple[float, int, int, str]:
    args = [str(PYINFRA), "--debug", "inventory/lab.py", "deploy.py"] + ([] if interactive else ["-y"])
    start = time.perf_counter()
    result = subprocess.run(args, cwd=PROJECT, capture_output=True, text=True, input="\n" if interactive else None)
    elapsed = time.perf_counter() - start
    log = result.stdout + result.stderr
    if result.returncode != 0:
        sys.exit(f"deploy failed:\n{log[-3000:]}")
    commands = len(re.findall(r"Running command on ", log))
    uploads = len(re.findall(r"Attempting upload of ", log))
    return elapsed, commands, uploads, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--interactive", action="store_true", help="two-pass run (no -y)")
    args = parser.parse_args()

    deploy(args.interactive)  # converge first: what follows has nothing to change
    runs = [deploy(args.interactive) for _ in range(args.runs)]
    changed = [log for *_, log in runs if re.search(r"\] Success", log)]
    if changed:
        sys.exit("a run that should change nothing changed something:\n" + changed[0][-3000:])
    times = [elapsed for elapsed, *_ in runs]
    commands = sorted({c for _, c, _, _ in runs})
    uploads = sorted({u for _, _, u, _ in runs})
    mode = "interactive (prepare + execute)" if args.interactive else "-y (execute only)"
    print(f"no-change full deploy, 1 lab host, {mode}, {args.runs} runs")
    print(f"  remote commands per run: {commands}   uploads: {uploads}")
    print(f"  wall time median {statistics.median(times):.2f} s  (min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
