"""Fleet cost: remote commands, API reads and logins, and wall time of the first deploy and of a
no-change run for 1, 4 and 16 containers, as ratios to 1 (issue 17, deliver 4).

    python -m lab up --scale && python bench/fleet.py [--counts 1 4 16] [--runs 3] [--no-first] [--provision-only]

For each count N: the fleet's guests (bench/fleet_inventory.py: fleet1..N over pve1 and pve2) are
destroyed through their nodes' API, then the whole deploy runs once from none (the first deploy: create, start,
venv, units, servers ready) and `--runs` times with nothing to change (-y). Remote commands per host
from pyinfra --debug ("Running command on HOST"); API requests per node from the emulator's request
logs (logins apart). The budgets: a no-change run costs at most 4 commands on a node and 7 in a
container, one API read per container (plus the node's list) and one login per node; no-change over
16 at most 3x the wall time of 1, first deploy of 4 at most 2x of 1. The guests are real LXC
containers: 16 of them on a 2-core machine are heavy (give --counts 1 4 to stop below).
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PYINFRA = PROJECT / ".venv" / "bin" / "pyinfra"
sys.path.insert(0, str(PROJECT))

from lab import inventory, layout  # noqa: E402
from lab.pve import requestlog  # noqa: E402
from sglang_pve.config.proxmox import load_api_settings  # noqa: E402
from sglang_pve.provision.nodes import Node  # noqa: E402

NODES = [layout.NODES["pve1"], layout.NODES["pve2"]]


def requests() -> dict[str, list[dict]]:
    return {n.name: requestlog.read(n.request_log) if n.request_log.exists() else [] for n in NODES}


# pyinfra's line as the barrier after the nodes' part starts: the provisioning is over there
BARRIER = "Starting operation: sglang-pve | Nodes prepared and containers provisioned"


def cpu_seconds() -> float | None:
    """CPU seconds the slot's lab has used (its nodes and guests: lab/layout.py cgroup_dirs, cgroup v1
    cpuacct or v2 cpu.stat); None where neither is readable. A guest destroyed takes its share along."""
    tree = layout.cgroup_dirs("x")["container"].rsplit("/", 1)[0]
    for base, name, scale in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage", 1e-9), ("/sys/fs/cgroup", "cpu.stat", 1e-6)):
        usages = list(Path(base, tree).glob(f"*/{name}"))
        if usages:
            text = [p.read_text() for p in usages]
            if name == "cpu.stat":  # usage_usec N
                text = [re.search(r"^usage_usec (\d+)", t, re.M)[1] for t in text]
            return sum(int(t) for t in text) * scale
    return None


def run(count: int, deploy: str = "deploy.py") -> tuple[float, dict, Counter, str, float | None, dict]:
    """One deploy of ``count`` containers: its wall time, API calls per node, remote commands per
    host, its output, and the seconds until the provisioning barrier (nodes prepared, containers
    created and started), and the CPU seconds the controller (pyinfra) and the lab spent on it."""
    before = {name: len(entries) for name, entries in requests().items()}
    lab_cpu, own = cpu_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "SGLANG_PVE_BENCH_CONTAINERS": str(count)}
    args = [str(PYINFRA), "--debug", "-y", "bench/fleet_inventory.py", deploy]
    start = time.perf_counter()
    provisioned, lines = None, []
    with subprocess.Popen(args, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as p:
        for line in p.stdout:
            lines.append(line)
            if provisioned is None and BARRIER in line:
                provisioned = time.perf_counter() - start
    elapsed = time.perf_counter() - start
    done, lab_after = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds()
    cpu = {
        "controller": done.ru_utime + done.ru_stime - own.ru_utime - own.ru_stime,
        "lab": lab_after - lab_cpu if lab_cpu is not None and lab_after is not None else None,
    }
    log = "".join(lines)
    if p.returncode != 0:
        sys.exit(f"deploy of {count} failed:\n{log[-4000:]}")
    calls = {}
    for name, entries in requests().items():
        new = entries[before[name] :]
        calls[name] = Counter("login" if e["path"] == "/access/ticket" else e["method"] for e in new)
    return elapsed, calls, Counter(re.findall(r"Running command on (\S+?):", log)), log, provisioned, cpu


def destroy(count: int) -> None:
    """Every fleet guest up to ``count`` gone (stopped, then destroyed through its node's API, as
    `pct destroy` would: the lab's pct has no destroy), and its host key pin with it."""
    inventory.export_password()
    for node in NODES:
        name, data = inventory.node_entry(node)
        api = Node(node.name, load_api_settings(node.name, data)).api
        listed = {int(entry["vmid"]): entry for entry in api.get(f"nodes/{node.name}/lxc")}
        for vmid in range(301, 301 + count):
            if vmid not in listed:
                continue
            if listed[vmid].get("status") == "running":
                api.run_task("POST", f"nodes/{node.name}/lxc/{vmid}/status/stop")
            api.run_task("DELETE", f"nodes/{node.name}/lxc/{vmid}")


def summary(count: int, runs: list) -> dict:
    commands = runs[0][2]
    nodes = {h: c for h, c in commands.items() if h.startswith("pve")}
    guests = {h: c for h, c in commands.items() if not h.startswith("pve")}
    calls = runs[0][1]
    return {
        "wall": statistics.median(r[0] for r in runs),
        "provisioned": statistics.median(r[4] or 0 for r in runs),
        "controller_cpu": statistics.median(r[5]["controller"] for r in runs),
        "lab_cpu": statistics.median(r[5]["lab"] or 0 for r in runs),
        "node_commands": max(nodes.values(), default=0),
        "container_commands": max(guests.values(), default=0),
        "api_get": sum(c["GET"] for c in calls.values()),
        "logins": max(c["login"] for c in calls.values()),
        "count": count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-first", action="store_true", help="keep the guests: no-change runs only")
    parser.add_argument(
        "--provision-only",
        action="store_true",
        help="the nodes' part alone (tasks/containers.py: create, start, host key), no deploy in the guests",
    )
    args = parser.parse_args()
    deploy = "tasks/containers.py" if args.provision_only else "deploy.py"
    first, idle = {}, {}
    for count in args.counts:
        if not args.no_first:
            destroy(max(args.counts))
            first[count] = summary(count, [run(count, deploy)])
        else:
            run(count, deploy)  # converge
        runs = [run(count, deploy) for _ in range(args.runs)]
        changed = [r[3] for r in runs if re.search(r"\] Success", r[3])]
        if changed:
            sys.exit(f"a no-change run of {count} changed something:\n" + changed[0][-3000:])
        idle[count] = summary(count, runs)
        print(f"{count} container(s): first {first.get(count)}\n    no-change {idle[count]}", flush=True)
    base = args.counts[0]
    for label, table in (("first deploy", first), ("no-change run", idle)):
        for count, row in table.items():
            print(
                f"{label:14} N={count:2}: wall {row['wall']:6.1f} s ({row['wall'] / table[base]['wall']:.2f}x of "
                f"{base}; provisioned after {row['provisioned']:.1f} s), max commands on a node "
                f"{row['node_commands']}, in a container {row['container_commands']}, API GETs {row['api_get']} "
                f"({row['api_get'] / count:.1f} per container), logins per node {row['logins']}; CPU s: controller "
                f"{row['controller_cpu']:.1f}, lab {row['lab_cpu']:.1f}"
            )


if __name__ == "__main__":
    main()
