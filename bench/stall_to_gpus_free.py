"""Time from a startup stall to free GPUs, in the lab: how long a hung server holds the GPUs.

    python bench/stall_to_gpus_free.py [--runs 5] [--phase cuda_graph] [--server baseline]

Each run stops every server unit, injects `hang: <phase>` into the simulator's fault file and
starts the unit. A probe on the target (monotonic clock, polling every 20 ms) follows the server
log, the diagnoses dir, /proc and the (fake) nvidia-smi, and records:

    stall start     the last log progress: a new byte that is not the agent's own line nor
                    probe noise (the gate's own definition of progress)
    diagnosis       the gate's diagnosis file appears: it decided (stall timeout + up to two
                    0.5 s polls) and collected the evidence (nvidia-smi, holders, py-spy)
    GPUs free       no process holds /dev/nvidia* AND every GPU's memory.used <= gpu_idle_mib
    unit failed     systemd reports the unit failed

and reports median, min and max over the runs of: stall detection (stall -> diagnosis), kill +
reap (diagnosis -> GPUs free: the gate's SIGKILL of the main PID, its exit, systemd's cgroup
kill, the kernel releasing the descriptors), the total stall -> GPUs free, stall -> unit failed,
and the gate's own seconds_stalled from the diagnosis. The lab is restored at the end (no faults, deploy re-run so
the active server runs again). The lab must be up (python -m lab up) and deployed.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_pve.agent.spec import STALL_PHASES  # noqa: E402
from sglang_pve.deploy import paths  # noqa: E402
from tests.conftest import group_data  # noqa: E402
from tests.lab.conftest import (  # noqa: E402
    PROJECT,
    on_target_python,
    read_diagnosis,
    refresh_simulator,
    restore_servers,
    set_faults,
    sh,
)

SERVERS = ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step")

# Runs on the target with the deployed agent on sys.path (its own log, noise and holder rules).
PROBE = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, "/opt/sglang-pve/sglang-pve-agent.pyz")
from sglang_pve.agent import contract, gpus, holders, output, phases
unit, log, diag_dir, idle_mib, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])

def active_state():
    return subprocess.run(["systemctl", "show", "-p", "ActiveState", "--value", unit],
                          capture_output=True, text=True).stdout.strip()

before = set(os.listdir(diag_dir)) if os.path.isdir(diag_dir) else set()
handle = open(log, "rb")
handle.seek(0, os.SEEK_END)
pending = b""
t0 = time.monotonic()
subprocess.run(["systemctl", "start", "--no-block", unit], check=True)
t = {"start": 0.0}
diag = None
while time.monotonic() - t0 < limit:
    now = time.monotonic() - t0
    chunk = handle.read()
    if chunk:
        pending += chunk
        *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
        real = [l.decode("utf-8", "replace") for l in lines]
        real = [l for l in real if l.strip() and phases.is_progress(l)]
        if real or (pending and not output.is_own(pending.decode("utf-8", "replace"))):
            if "diagnosis" not in t:
                t["progress"] = now
    if "diagnosis" not in t:
        names = set(os.listdir(diag_dir)) if os.path.isdir(diag_dir) else set()
        new = sorted(n for n in names - before if n.endswith(".json") and not n.startswith("."))  # not the temp file
        if new:
            t["diagnosis"], diag = now, new[-1]
    else:
        if "released" not in t and not holders.scan(contract.UNIT_PREFIX):
            t["released"] = now
        if "released" in t and "gpus_free" not in t:
            if not gpus.busy(gpus.query_gpus() or [], idle_mib):
                t["gpus_free"] = time.monotonic() - t0
        if "failed" not in t and active_state() == "failed":
            t["failed"] = now
        if "gpus_free" in t and "failed" in t:
            break
    time.sleep(0.02)
print(json.dumps({"t": t, "diagnosis": diag}))
"""


def stop_all() -> None:
    units = " ".join(paths.unit_name(s) for s in SERVERS)
    sh(f"systemctl stop {units}; systemctl reset-failed {units} 2>/dev/null; true", check=False)


def one_run(server: str, phase: str, idle_mib: float) -> dict:
    stop_all()
    set_faults({server: {"hang": phase}})
    out = on_target_python(
        PROBE, paths.unit_name(server), paths.log_path(server), paths.DIAGNOSES_DIR, str(idle_mib), "120", timeout=180
    )
    probe = json.loads(out)
    t = probe["t"]
    missing = [k for k in ("progress", "diagnosis", "released", "gpus_free", "failed") if k not in t]
    if missing:
        raise SystemExit(f"run incomplete, never saw: {', '.join(missing)}: {probe}")
    diag = read_diagnosis(probe["diagnosis"])
    if diag["kind"] != "stall" or diag["phase"] != phase:
        raise SystemExit(f"unexpected diagnosis: {diag['kind']} in {diag['phase']}: {diag['summary']}")
    stall = t["progress"]
    return {
        "gate": diag["seconds_stalled"],
        "detect": t["diagnosis"] - stall,
        "kill_reap": t["gpus_free"] - t["diagnosis"],
        "total": t["gpus_free"] - stall,
        "failed": t["failed"] - stall,
    }


COLUMNS = [
    ("detect", "stall detection (stall -> diagnosis)"),
    ("kill_reap", "kill + reap (diagnosis -> GPUs free)"),
    ("total", "stall -> GPUs free"),
    ("failed", "stall -> unit failed"),
    ("gate", "gate's own seconds_stalled"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--phase", default="cuda_graph", choices=STALL_PHASES)
    parser.add_argument("--server", default=None, help="default baseline (eagle3-2step for --phase draft)")
    args = parser.parse_args()
    server = args.server or ("eagle3-2step" if args.phase == "draft" else "baseline")
    life = group_data("all", "lab")["lifecycle"]
    subprocess.run([sys.executable, "-m", "lab", "up"], cwd=PROJECT, check=True, capture_output=True)
    restore_servers()
    idle_mib = float(json.loads(sh(f"cat {paths.lifecycle_path(server)}"))["gpu_idle_mib"])

    refresh_simulator()  # the lab keeps the pinned version: reinstall when lab/sglang_sim changed
    runs = []
    try:
        for n in range(args.runs):
            runs.append(one_run(server, args.phase, idle_mib))
            print(f"run {n + 1}/{args.runs}: " + "  ".join(f"{k} {v:.2f}s" for k, v in runs[-1].items()), flush=True)
    finally:
        restore_servers()

    print(
        f"\nstall -> GPUs free, lab, {server} hung in {args.phase} "
        f"(stall timeout {life['stall_timeout_s'][args.phase]} s, gate poll 0.5 s), {args.runs} runs, seconds"
    )
    width = max(len(title) for _, title in COLUMNS)
    print(f"  {'':{width}}  {'median':>7}  {'min':>7}  {'max':>7}")
    for key, title in COLUMNS:
        values = [run[key] for run in runs]
        print(f"  {title:{width}}  {statistics.median(values):7.2f}  {min(values):7.2f}  {max(values):7.2f}")


if __name__ == "__main__":
    main()
