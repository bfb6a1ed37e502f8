"""Cost of a no-change provisioning run: Proxmox API calls, remote commands per host, wall time.

    python bench/no_change_provision.py [--runs 5]

The whole deploy against the lab (node pve1 provisions sglang1 through its API, then the deploy
inside sglang1), converged once, then run `--runs` times with nothing to change (-y). API calls
come from the emulator's request log (the ticket login counted apart), remote commands from
pyinfra --debug ("Running command on HOST"), per host: sglang1's are what bench/no_change_deploy.py
measures; pve1's and the API calls are what provisioning adds. The lab must be up.
"""

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PYINFRA = PROJECT / ".venv" / "bin" / "pyinfra"
sys.path.insert(0, str(PROJECT))

from lab import layout  # noqa: E402
from lab.pve import requestlog  # noqa: E402


def requests() -> list[dict]:
    return requestlog.read(layout.PVE_REQUEST_LOG) if layout.PVE_REQUEST_LOG.exists() else []


def deploy() -> tuple[float, Counter, Counter, str]:
    before = len(requests())
    start = time.perf_counter()
    result = subprocess.run(
        [str(PYINFRA), "--debug", "-y", "inventory/lab.py", "deploy.py"], cwd=PROJECT, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    log = result.stdout + result.stderr
    if result.returncode != 0:
        sys.exit(f"deploy failed:\n{log[-3000:]}")
    calls = Counter("login" if e["path"] == "/access/ticket" else e["method"] for e in requests()[before:])
    commands = Counter(re.findall(r"Running command on (\S+?):", log))
    return elapsed, calls, commands, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    deploy()  # converge first (creates sglang1 when pve1 has none): what follows has nothing to change
    runs = [deploy() for _ in range(args.runs)]
    changed = [log for *_, log in runs if re.search(r"\] Success", log)]
    if changed:
        sys.exit("a run that should change nothing changed something:\n" + changed[0][-3000:])
    times = [elapsed for elapsed, *_ in runs]
    print(f"no-change provisioning + deploy, node pve1 + container sglang1, -y, {args.runs} runs")
    for label, index in (("API calls per run", 1), ("remote commands per run", 2)):
        values = sorted({tuple(sorted(r[index].items())) for r in runs})
        print(f"  {label}: {' | '.join(', '.join(f'{k} {v}' for k, v in value) for value in values)}")
    print(f"  wall time median {statistics.median(times):.2f} s  (min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
