"""Switch and rollback overhead beyond the server's own startup, and uv vs pip for one lock, in the lab.

    python bench/releases.py [--runs 3]

No-op: the switch task when the configuration already runs (pyinfra start, SSH, facts).
Switch: `pyinfra inventory/lab.py tasks/switch.py --data server=X`, alternating baseline and
eagle3-2step. Rollback: deploy the lab's good nightly (`--data sglang_version=nightly`), then
`tasks/rollback.py` back to the pinned version. For each, the wall time of the whole pyinfra run
(connect, facts, the agent's record/restore, stop, GPUs free, start, gate) and the started
server's own startup: from its main process's start to the unit becoming active (systemd's
ExecMainStartTimestampMonotonic -> ActiveEnterTimestampMonotonic: SGLang's phases plus the
gate's last poll). Overhead = wall - own startup. The agent's `switch-timings` line splits it.

uv vs pip: on the target, a fresh venv per run, the pinned version's lock installed with
hashes required and no resolution (what a rollback does when the venv was removed), once with
empty caches (cold) and once again (warm). The lab's lock is two distributions (the simulator and
PyYAML), so these numbers are about the installers' fixed costs, not torch's 2 GB.

The lab must be up and deployed; the active configuration runs again at the end.
"""

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_pve.deploy import paths  # noqa: E402
from tests.conftest import group_data  # noqa: E402
from tests.lab.conftest import pyinfra, restore_servers, sh  # noqa: E402

VENVS = group_data("all")["sglang_venvs_dir"]
PINNED = group_data("all")["sglang_version"]
TIMINGS = re.compile(r"switch-timings (\{.*?\})")

INSTALL = {
    "uv": f"{paths.UV_VENV}/bin/uv pip install --quiet --require-hashes --no-deps --python $V/bin/python "
    "--index-url $INDEX -r $LOCK",
    "pip": "$V/bin/pip install --quiet --disable-pip-version-check --no-input --no-compile --require-hashes "
    "--no-deps --index-url $INDEX -r $LOCK",
}


def own_startup(server: str) -> float:
    out = sh(
        f"systemctl show -p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic {paths.unit_name(server)}"
    )
    values = dict(line.split("=", 1) for line in out.splitlines())
    return (int(values["ActiveEnterTimestampMonotonic"]) - int(values["ExecMainStartTimestampMonotonic"])) / 1e6


def timed(*args: str, deploy: str) -> tuple[float, dict]:
    started = time.monotonic()
    _, output = pyinfra("-vvv", *args, deploy=deploy)  # -vvv: the commands' output, the agent's timings
    wall = time.monotonic() - started
    found = TIMINGS.findall(output)
    return wall, json.loads(found[-1]) if found else {}


def row(label: str, wall: float, startup: float, agent: dict) -> dict:
    entry = {
        "what": label,
        "wall_s": round(wall, 2),
        "own_startup_s": round(startup, 2),
        "overhead_s": round(wall - startup, 2),
        **{f"agent_{k}": v for k, v in agent.items()},
    }
    print(json.dumps(entry), flush=True)
    return entry


def bench_noop(runs: int) -> list[dict]:
    """The same task when nothing is to be done: pyinfra's start, SSH to the inventory's hosts,
    loading the deploy, the facts; what any switch pays before it stops anything."""
    rows = []
    for _ in range(runs):
        wall, _ = timed("--data", "server=baseline", deploy="tasks/switch.py")
        rows.append({"what": "no-op switch task", "wall_s": round(wall, 2)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench_switches(runs: int) -> list[dict]:
    rows = []
    for server in ["eagle3-2step", "baseline"] * runs:
        wall, agent = timed("--data", f"server={server}", deploy="tasks/switch.py")
        rows.append(row(f"switch to {server}", wall, own_startup(server), agent))
    return rows


def bench_rollbacks(runs: int) -> list[dict]:
    rows = []
    for _ in range(runs):
        pyinfra("--data", "sglang_version=nightly")
        wall, agent = timed(deploy="tasks/rollback.py")
        rows.append(row("rollback nightly -> pinned", wall, own_startup("baseline"), agent))
    return rows


def bench_installers() -> list[dict]:
    from lab.layout import INDEX_URL

    lock = f"{VENVS}/sglang-{PINNED}.lock"
    script = "\n".join(
        [
            f"LOCK={lock}; INDEX={INDEX_URL}",
            "for tool in uv pip; do for cache in cold warm; do",
            "  V=/tmp/bench-venv-$tool; rm -rf $V; python3 -m venv $V",
            "  [ $cache = cold ] && rm -rf /root/.cache/uv /root/.cache/pip",
            "  start=$(date +%s.%N)",
            f"  if [ $tool = uv ]; then {INSTALL['uv']}; else {INSTALL['pip']}; fi",
            '  end=$(date +%s.%N); echo "$tool $cache $start $end"; rm -rf $V',
            "done; done",
        ]
    )
    rows = []
    for line in sh(script).splitlines():
        tool, cache, start, end = line.split()
        rows.append(
            {"what": f"install lock with {tool} ({cache} cache)", "wall_s": round(float(end) - float(start), 2)}
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    restore_servers()
    try:
        rows = bench_noop(args.runs) + bench_switches(args.runs) + bench_rollbacks(args.runs) + bench_installers()
    finally:
        restore_servers()
    for label in ("switch", "rollback"):
        measured = [r for r in rows if r["what"].startswith(label)]
        overheads = [r["overhead_s"] for r in measured]
        stops = [r.get("agent_stop_s", 0) for r in measured]
        print(
            f"{label}: overhead beyond the server's own startup, median {statistics.median(overheads):.2f} s "
            f"(min {min(overheads):.2f}, max {max(overheads):.2f}, n={len(overheads)}); of it the old server's "
            f"stop (drain), median {statistics.median(stops):.2f} s"
        )
    noop = [r["wall_s"] for r in rows if r["what"].startswith("no-op")]
    print(f"no-op switch task (pyinfra start, SSH, facts): median {statistics.median(noop):.2f} s")


if __name__ == "__main__":
    main()
