"""Fleet cost: remote commands, API reads and logins, and wall time of the first deploy and of a
no-change run for 1, 4 and 16 containers, as ratios to 1 (issue 17, deliver 4).

    python -m lab up --scale && python bench/fleet.py [--counts 1 4 16] [--runs 3] [--no-first] [--provision-only]
    python bench/fleet.py --per-command [--no-first] [--top 15]   (one container: CPU per remote command)

For each count N: the fleet's guests (bench/fleet_inventory.py: fleet1..N over pve1 and pve2) are
destroyed through their nodes' API, then the whole deploy runs once from none (the first deploy: create, start,
venv, units, servers ready) and `--runs` times with nothing to change (-y), timed without --debug
(as a user runs it: its log costs the controller CPU per host). Remote commands per host from one
more no-change run with pyinfra --debug ("Running command on HOST"); API requests per node from the emulator's request
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
import threading
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


def run(
    count: int, deploy: str = "deploy.py", debug: bool = True
) -> tuple[float, dict, Counter, str, float | None, dict]:
    """One deploy of ``count`` containers: its wall time, API calls per node, remote commands per
    host (counted with `debug` only: pyinfra --debug names each), its output, and the seconds until
    the provisioning barrier (nodes prepared, containers created and started), and the CPU seconds
    the controller (pyinfra) and the lab spent on it."""
    before = {name: len(entries) for name, entries in requests().items()}
    lab_cpu, own = cpu_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "SGLANG_PVE_BENCH_CONTAINERS": str(count)}
    args = [str(PYINFRA), *(["--debug"] if debug else []), "-y", "bench/fleet_inventory.py", deploy]
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


def summary(count: int, runs: list, counted: tuple | None = None) -> dict:
    """Medians of the runs' walls and CPU seconds; commands and API calls of `counted` (a --debug
    run), else of the first run."""
    commands = (counted or runs[0])[2]
    nodes = {h: c for h, c in commands.items() if h.startswith("pve")}
    guests = {h: c for h, c in commands.items() if not h.startswith("pve")}
    calls = (counted or runs[0])[1]
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


# --per-command: where one container's CPU goes. fleet1's deploy alone, run with pyinfra --debug, while
# every SAMPLE_S the guest's cgroups (cgroup v2 cpu.stat, or v1 cpuacct, lab/layout.py cgroup_dirs; every
# cgroup its systemd made below it, so a command's CPU is told apart from the units' it started) and
# the controller's own CPU (/proc/<pid>/stat of pyinfra) are read. A container's commands run one after
# the other, so the CPU between the line that starts one ("Running command on fleet1") and the next is
# that command's (plus whatever the guest's units did meanwhile: the cgroups say where). The totals
# are exact; a short command's share is as fine as the sampling.
SAMPLE_S = 0.05
VMID = 301  # fleet1 (bench/fleet_inventory.py)
RUNNING = re.compile(r"Running command on fleet1: (.*)")


def guest_root() -> tuple[Path, str, float] | None:
    """The guest's cgroup directory, its usage file's name and the scale to seconds."""
    tree = layout.cgroup_dirs(str(VMID))["container"]
    # cgroup v2's cpu.stat first (a hybrid host's unified tree has it for every cgroup the guest's systemd
    # made; v1's cpuacct only for the guest's own)
    bases = (("/sys/fs/cgroup/unified", "cpu.stat", 1e-6), ("/sys/fs/cgroup", "cpu.stat", 1e-6))
    for base, name, scale in (*bases, ("/sys/fs/cgroup/cpuacct", "cpuacct.usage", 1e-9)):
        if Path(base, tree, name).exists():
            return Path(base, tree), name, scale
    return None


def usages(root: tuple[Path, str, float] | None) -> dict[str, float]:
    """CPU seconds of the guest (key "") and of every cgroup below it, by path relative to it."""
    if root is None:
        found = guest_root()
        if found is None:
            return {}
        root = found
    base, name, scale = root
    found: dict[str, float] = {}
    for directory, _, files in os.walk(base):  # a cgroup gone while walked is left out (os.walk ignores it)
        if name not in files:
            continue
        try:
            text = Path(directory, name).read_text()
        except OSError:
            continue
        if name == "cpu.stat":
            match = re.search(r"^usage_usec (\d+)", text, re.M)
            text = match[1] if match else "0"
        found[os.path.relpath(directory, base) if directory != str(base) else ""] = int(text) * scale
    return found


def own_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_command(first: bool, top: int) -> None:
    """--per-command: fleet1's deploy alone (the first one when `first`), its CPU per remote command."""
    if first:
        destroy(1)
    env = {**os.environ, "SGLANG_PVE_BENCH_CONTAINERS": "1"}
    command = [str(PYINFRA), "--debug", "-y", "bench/fleet_inventory.py", "deploy.py"]
    samples: list[tuple[float, dict[str, float], float]] = []
    marks: list[tuple[float, str]] = []
    done = threading.Event()
    with subprocess.Popen(
        command, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:

        def sample() -> None:
            root = guest_root()
            while not done.is_set():
                root = root or guest_root()
                try:
                    controller = own_cpu(proc.pid)
                except OSError:
                    controller = samples[-1][2] if samples else 0.0
                samples.append((time.perf_counter(), usages(root), controller))
                time.sleep(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert proc.stdout is not None
        log = []
        for line in proc.stdout:
            log.append(line)
            match = RUNNING.search(line)
            if match:
                marks.append((time.perf_counter(), match[1].strip()))
        done.set()
        sampler.join()
    if proc.returncode != 0:
        sys.exit("the deploy failed:\n" + "".join(log[-60:]))
    report(samples, marks, top)


def at(samples: list, moment: float) -> tuple[dict[str, float], float]:
    """The last sample taken at or before `moment` (the first one before any)."""
    chosen = samples[0]
    for sample in samples:
        if sample[0] > moment:
            break
        chosen = sample
    return chosen[1], chosen[2]


def report(samples: list, marks: list, top: int) -> None:
    first, last = samples[0], samples[-1]
    guest_total = last[1].get("", 0.0) - first[1].get("", 0.0)
    print(f"commands in fleet1: {len(marks)}; guest CPU {guest_total:.2f} s; controller CPU {last[2]:.2f} s")
    rows = []
    bounds = [m[0] for m in marks] + [last[0]]
    for (start, text), end in zip(marks, bounds[1:], strict=True):
        before, c0 = at(samples, start)
        after, c1 = at(samples, end)
        delta = {group: after[group] - before.get(group, 0.0) for group in after if group}
        leaves = sorted(
            ((g, v) for g, v in delta.items() if v >= 0.05 and not any(o.startswith(g + "/") for o in delta)),
            key=lambda item: -item[1],
        )
        total = after.get("", 0.0) - before.get("", 0.0)
        rows.append((total, end - start, c1 - c0, text, leaves[:3]))
    rows = [(*row, index) for index, row in enumerate(rows, 1)]
    print(f"{'#':>3} {'guest s':>8} {'wall s':>7} {'ctrl s':>7}  command (cgroups)")
    for total, wall, controller, text, leaves, index in sorted(rows, key=lambda r: -r[0])[:top]:
        where = ", ".join(f"{g.removeprefix('ns/')} {v:.2f}" for g, v in leaves)
        print(f"{index:3} {total:8.2f} {wall:7.2f} {controller:7.2f}  {text[:150]}{' ...' if len(text) > 150 else ''}")
        if where:
            print(f"{'':30}({where})")


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
    parser.add_argument(
        "--per-command",
        action="store_true",
        help="one container (fleet1): CPU seconds per remote command, first deploy unless --no-first",
    )
    parser.add_argument("--top", type=int, default=15, help="with --per-command: the commands shown, most CPU first")
    args = parser.parse_args()
    if args.per_command:
        per_command(not args.no_first, args.top)
        return
    deploy = "tasks/containers.py" if args.provision_only else "deploy.py"
    first, idle = {}, {}
    for count in args.counts:
        if not args.no_first:
            destroy(max(args.counts))
            first[count] = summary(count, [run(count, deploy)])
        else:
            run(count, deploy)  # converge
        # the no-change runs timed as a user runs them, without --debug (its log of every command
        # costs the controller CPU per host); one more, with it, counts their commands
        counted = run(count, deploy)
        runs = [run(count, deploy, debug=False) for _ in range(args.runs)]
        changed = [r[3] for r in [counted, *runs] if re.search(r"\] Success", r[3])]
        if changed:
            sys.exit(f"a no-change run of {count} changed something:\n" + changed[0][-3000:])
        idle[count] = summary(count, runs, counted)
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
