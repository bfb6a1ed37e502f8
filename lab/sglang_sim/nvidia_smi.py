#!/usr/bin/env python3
"""Fake `nvidia-smi` for the sglang-pve lab: 8x RTX PRO 6000 Blackwell Server Edition.

Installed by the lab as /usr/bin/nvidia-smi in the LXC container; stdlib only. Memory and
utilization come from the SGLang simulator's records, <SGLANG_SIM_RUN_DIR>/gpus/<pid>.json
(default /run/sglang-sim), summed per GPU over live processes; records of dead processes (or
of a recycled PID) are dropped. Supported forms, as the real tool prints them:

  nvidia-smi --query-gpu=index,uuid,name,memory.used,... --format=csv[,noheader][,nounits]
  nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits
      (prints no rows: inside an LXC container the PID namespace hides the processes)
  nvidia-smi -L
  nvidia-smi            (summary table, approximate)
  -i/--id=N[,M] restricts the GPUs. An unknown field exits 2 with nvidia-smi's message.

The GPUs are those whose /dev/nvidiaN node exists (<SGLANG_SIM_DEV_DIR>, default /dev), as NVML
sees only the devices a container was given: a container with dev0..dev3 lists 4 GPUs, none
"No devices were found" (exit 6). A GPU keeps its index N (the real tool renumbers from 0).

It makes no device node. The real nvidia-smi is NVML's (libnvidia-ml, closed source: not read);
what is public is nvidia-modprobe's side, a setuid tool that creates the nodes "on behalf of
NVIDIA Linux driver components which may not have sufficient privileges" (NVIDIA/nvidia-modprobe
nvidia-modprobe.c print_summary, a9556df), i.e. the driver's libraries call it, with -c N for
/dev/nvidiaN and nvidiactl and -u for the uvm pair (which CUDA, not NVML, needs). Which of those
NVML asks for could not be verified, so the toolkit's node unit does not rely on nvidia-smi: it
runs nvidia-modprobe itself (sglang_pve/provision/node_prep.py).

The driver version is the installed user-space library's: /etc/sglang-sim/driver-version (the lab
writes it), else DRIVER_VERSION. When /proc/driver/nvidia/version (the kernel module's, which the
lab binds into its containers) names another version, every call fails like the real tool:
"Failed to initialize NVML: Driver/library version mismatch", exit 18.
"""

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

GPU_COUNT = 8  # the node's GPUs; a container sees those passed through (visible_gpus)
NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
MEMORY_TOTAL_MIB = 97887  # keep in step with sglang/sim/gpu.py
IDLE_MIB = 3  # what an idle card reports (driver reservations not visible in memory.used)
DRIVER_VERSION = "580.95.05"
LIBRARY_VERSION_FILE = Path("/etc/sglang-sim/driver-version")
KERNEL_VERSION_FILE = Path("/proc/driver/nvidia/version")
CUDA_VERSION = "13.0"
POWER_LIMIT_W = 600.0
PCI_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."


def gpu_uuid(index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"sglang-pve-lab-gpu-{index}"))


def _start_time(pid: int):
    """Start time of a live process; None when it is gone or a zombie (its fds are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def read_usage() -> dict:
    """{gpu index: (memory used MiB, utilization %)} from live processes' records."""
    usage = {i: [IDLE_MIB, 0] for i in visible_gpus()}
    records = Path(os.environ.get("SGLANG_SIM_RUN_DIR", "/run/sglang-sim")) / "gpus"
    for path in records.glob("*.json") if records.is_dir() else ():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _start_time(record.get("pid", -1)) != record.get("starttime"):
            try:
                path.unlink()  # the process is gone (or its PID was reused): drop the record
            except OSError:
                pass
            continue
        gpu = record.get("gpu")
        if gpu in usage:
            usage[gpu][0] += int(record.get("memory_used_mib", 0))
            usage[gpu][1] = min(100, usage[gpu][1] + int(record.get("utilization_gpu", 0)))
    return {i: (min(mem, MEMORY_TOTAL_MIB), util) for i, (mem, util) in usage.items()}


def _power(util: int) -> float:
    return 31.5 + (POWER_LIMIT_W - 60) * util / 100


# field -> (csv header, unit or None, value(index, used_mib, util))
FIELDS = {
    "index": ("index", None, lambda i, m, u: str(i)),
    "count": ("count", None, lambda i, m, u: str(len(visible_gpus()))),
    "name": ("name", None, lambda i, m, u: NAME),
    "uuid": ("uuid", None, lambda i, m, u: gpu_uuid(i)),
    "serial": ("serial", None, lambda i, m, u: f"18{i:011d}"),
    "pci.bus_id": ("pci.bus_id", None, lambda i, m, u: PCI_BUS_IDS[i]),
    "driver_version": ("driver_version", None, lambda i, m, u: DRIVER_VERSION),
    "vbios_version": ("vbios_version", None, lambda i, m, u: "98.02.50.00.01"),
    "persistence_mode": ("persistence_mode", None, lambda i, m, u: "Enabled"),
    "compute_mode": ("compute_mode", None, lambda i, m, u: "Default"),
    "pstate": ("pstate", None, lambda i, m, u: "P1" if m > IDLE_MIB else "P8"),
    "memory.total": ("memory.total [MiB]", "MiB", lambda i, m, u: str(MEMORY_TOTAL_MIB)),
    "memory.used": ("memory.used [MiB]", "MiB", lambda i, m, u: str(m)),
    "memory.free": ("memory.free [MiB]", "MiB", lambda i, m, u: str(MEMORY_TOTAL_MIB - m)),
    "utilization.gpu": ("utilization.gpu [%]", "%", lambda i, m, u: str(u)),
    "utilization.memory": ("utilization.memory [%]", "%", lambda i, m, u: str(u // 2)),
    "temperature.gpu": ("temperature.gpu", None, lambda i, m, u: str(32 + u * 45 // 100)),
    "power.draw": ("power.draw [W]", "W", lambda i, m, u: f"{_power(u):.2f}"),
    "power.limit": ("power.limit [W]", "W", lambda i, m, u: f"{POWER_LIMIT_W:.2f}"),
}
ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "gpu_serial": "serial"}
APP_FIELDS = {
    "pid",
    "process_name",
    "name",
    "used_memory",
    "used_gpu_memory",
    "gpu_uuid",
    "gpu_name",
    "gpu_bus_id",
    "gpu_serial",
    "timestamp",
}


def fail(message: str, code: int = 2) -> None:
    print(message, end="\n\n" if message.startswith("Field") else "\n")
    sys.exit(code)


def parse_args(argv: list) -> dict:
    """Options as {name: value}; `--opt=value` and `--opt value` both accepted."""
    opts, it = {}, iter(argv)
    for arg in it:
        name, sep, value = arg.partition("=")
        if name in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id"):
            opts[name.lstrip("-")] = value if sep else next(it, "")
        elif arg in ("-L", "--list-gpus"):
            opts["list"] = True
        else:
            fail(BAD_ARGS)
    return opts


def visible_gpus() -> list:
    """Indexes of the GPUs whose device node this system has."""
    dev = Path(os.environ.get("SGLANG_SIM_DEV_DIR", "/dev"))
    return [i for i in range(GPU_COUNT) if (dev / f"nvidia{i}").exists()]


def selected_gpus(opts: dict) -> list:
    visible = visible_gpus()
    if not visible:
        fail("No devices were found", code=6)
    wanted = opts.get("i") or opts.get("id")
    if not wanted:
        return visible
    indexes = []
    for item in wanted.split(","):
        if not item.strip().isdigit() or int(item) not in visible:
            fail("No devices were found", code=6)
        indexes.append(int(item))
    return indexes


def query(fields_arg: str, fmt: str, gpus: list, compute_apps: bool) -> None:
    fields = [f.strip() for f in fields_arg.split(",") if f.strip()]
    if not fields:
        fail(BAD_ARGS)
    for field in fields:
        if field not in (APP_FIELDS if compute_apps else FIELDS.keys() | ALIASES.keys()):
            fail(f'Field "{field}" is not a valid field to query.')
    options = [o.strip() for o in fmt.split(",")]
    if options[0] != "csv" or not set(options[1:]) <= {"noheader", "nounits"}:
        fail(BAD_ARGS)
    noheader, nounits = "noheader" in options, "nounits" in options
    if compute_apps:
        if not noheader:
            print(", ".join(fields))
        return  # PID namespace of the container: no process is visible
    specs = [FIELDS[ALIASES.get(f) or f] for f in fields]
    if not noheader:
        print(", ".join(header for header, _, _ in specs))  # nounits keeps "[MiB]" in headers
    usage = read_usage()
    for index in gpus:
        mem, util = usage[index]
        values = []
        for _, unit, value in specs:
            text = value(index, mem, util)
            values.append(text if nounits or unit is None else f"{text} {unit}")
        print(", ".join(values))


def list_gpus(gpus: list) -> None:
    for index in gpus:
        print(f"GPU {index}: {NAME} (UUID: {gpu_uuid(index)})")


def _box(*cells: str) -> str:
    """One table row: cells padded (or clipped) to the real tool's column widths."""
    widths = (41, 24, 22) if len(cells) == 3 else (89,)
    return "|" + "|".join(f"{cell:<{w}.{w}}" for cell, w in zip(cells, widths, strict=False)) + "|"


def summary(gpus: list) -> None:
    """The plain `nvidia-smi` table (layout approximates driver 580's)."""
    usage = read_usage()
    rule, wide = "+" + "+".join("-" * w for w in (41, 24, 22)) + "+", "+" + "-" * 89 + "+"
    name = NAME if len(NAME) <= 26 else NAME[:23] + "..."
    lines = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        wide,
        _box(f" NVIDIA-SMI {DRIVER_VERSION:<22}Driver Version: {DRIVER_VERSION:<15}CUDA Version: {CUDA_VERSION}"),
        rule,
        _box(" GPU  Name                 Persistence-M", " Bus-Id          Disp.A", " Volatile Uncorr. ECC"),
        _box(" Fan  Temp   Perf          Pwr:Usage/Cap", "           Memory-Usage", " GPU-Util  Compute M."),
        _box("", "", "               MIG M."),
        rule.replace("-", "="),
    ]
    for index in gpus:
        mem, util = usage[index]
        pstate = "P1" if mem > IDLE_MIB else "P8"
        lines += [
            _box(f" {index:>3}  {name:<26}      On", f"   {PCI_BUS_IDS[index]} Off", "                  Off"),
            _box(
                f" N/A   {32 + util * 45 // 100:>2}C    {pstate}   {_power(util):>12.0f}W /  {POWER_LIMIT_W:.0f}W",
                f" {mem:>7}MiB / {MEMORY_TOTAL_MIB:>6}MiB ",
                f" {util:>6}%      Default ",
            ),
            _box("", "", "                  N/A"),
            rule,
        ]
    lines += [
        "",
        wide,
        _box(" Processes:"),
        _box("  GPU   GI   CI              PID   Type   Process name                        GPU Memory"),
        _box("        ID   ID                                                               Usage"),
        "|" + "=" * 89 + "|",
        _box("  No running processes found"),
        wide,
    ]
    print("\n".join(lines))


def check_driver() -> None:
    """Adopt the installed library version; refuse, as NVML does, a kernel module of another."""
    global DRIVER_VERSION
    try:
        DRIVER_VERSION = LIBRARY_VERSION_FILE.read_text().strip() or DRIVER_VERSION
    except OSError:
        pass
    try:
        kernel = KERNEL_VERSION_FILE.read_text().split("x86_64", 1)[1].split()[0]
    except (OSError, IndexError):
        return
    if kernel != DRIVER_VERSION:
        print(f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {DRIVER_VERSION}")
        sys.exit(18)


def main(argv: list) -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `nvidia-smi | head` must not traceback
    check_driver()
    opts = parse_args(argv)
    gpus = selected_gpus(opts)
    if "query-gpu" in opts or "query-compute-apps" in opts:
        if "format" not in opts:
            fail(BAD_ARGS)
        compute_apps = "query-compute-apps" in opts
        query(opts["query-compute-apps" if compute_apps else "query-gpu"], opts["format"], gpus, compute_apps)
    elif opts.get("list"):
        list_gpus(gpus)
    else:
        summary(gpus)


if __name__ == "__main__":
    main(sys.argv[1:])
