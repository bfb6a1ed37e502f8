"""GPUs as the container sees them: nvidia-smi's numbers, the driver's device majors and nodes.

The parse functions take text and do no I/O, so the pyinfra facts that run the same commands
over SSH (deploy/facts/gpu.py) reuse them:

    parse_gpu_csv(out of `nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,
                  utilization.gpu --format=csv,noheader,nounits`)   -> [Gpu, ...]
    parse_proc_devices(cat /proc/devices)                           -> {"nvidia": 195, ...}
    parse_driver_version(cat /proc/driver/nvidia/version)           -> "580.95.05"

Majors are never assumed: nvidia is 195 by convention, but nvidia-uvm and nvidia-caps are
allocated dynamically at module load and differ between hosts.
"""

import csv
import glob
import io
import os
import re
import stat
from dataclasses import dataclass

from sglang_pve.agent import bounded, overrides

QUERY = "index,uuid,name,memory.used,memory.total,utilization.gpu"


class GpuQueryError(RuntimeError):
    """nvidia-smi exists but failed (driver/library mismatch, no devices, timeout)."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_used_mib: int | None  # None where nvidia-smi says [N/A] or [Not Supported]
    memory_total_mib: int | None
    utilization_pct: int | None


@dataclass(frozen=True)
class DeviceNode:
    path: str
    major: int
    minor: int


def parse_gpu_csv(text: str) -> list[Gpu]:
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 6:
            raise GpuQueryError(f"unexpected nvidia-smi line (want 6 fields: {QUERY}): {','.join(row)!r}")
        index, uuid, name, used, total, util = (field.strip() for field in row)
        gpus.append(Gpu(int(index), uuid, name, _number(used), _number(total), _number(util)))
    return gpus


def _number(field: str) -> int | None:
    """'1234' -> 1234, '12.5' -> 12; '[N/A]', '[Not Supported]', 'N/A', '' -> None."""
    try:
        return int(float(field))
    except ValueError:
        return None


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character-device majors of the NVIDIA driver, keyed by name; `nvidia-frontend` (older
    drivers' name for the 195 major) is reported as `nvidia`."""
    majors: dict[str, int] = {}
    section = None
    for line in text.splitlines():
        if line.endswith("devices:"):
            section = line.split()[0].lower()
            continue
        parts = line.split()
        if section == "character" and len(parts) == 2 and parts[0].isdigit() and parts[1].startswith("nvidia"):
            name = "nvidia" if parts[1] == "nvidia-frontend" else parts[1]
            majors[name] = int(parts[0])
    return majors


def parse_driver_version(text: str) -> str | None:
    """From /proc/driver/nvidia/version (`NVRM version: NVIDIA UNIX Open Kernel Module for x86_64
    580.95.05  Release Build ...`) or from nvidia-smi's `driver_version` output."""
    for line in text.splitlines():
        if line.startswith("NVRM") or re.fullmatch(r"\s*\d+\.\d+(\.\d+)?\s*", line):
            match = re.search(r"(?<![\w.])(\d{2,4}\.\d{1,3}(?:\.\d{1,3})?)(?![\w.])", line)
            if match:
                return match.group(1)
    return None


def query_gpus(timeout: float | None = None) -> list[Gpu] | None:
    """Every GPU's memory and utilization; None where nvidia-smi is absent."""
    out = _nvidia_smi(
        [f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout or overrides.nvidia_smi_timeout()
    )
    return None if out is None else parse_gpu_csv(out)


def device_majors() -> dict[str, int]:
    return parse_proc_devices(_read(f"{overrides.proc_root()}/devices") or "")


def device_nodes() -> list[DeviceNode]:
    """The NVIDIA device nodes (the SGLANG_PVE_DEV_GLOB files, nvidia-caps/* included)."""
    nodes = []
    for path in sorted(_expand(overrides.device_glob())):
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            nodes.append(DeviceNode(path, os.major(info.st_rdev), os.minor(info.st_rdev)))
    return nodes


def driver_version() -> str | None:
    text = _read(f"{overrides.proc_root()}/driver/nvidia/version")
    if text is None:
        try:
            text = _nvidia_smi(["--query-gpu=driver_version", "--format=csv,noheader"], overrides.nvidia_smi_timeout())
        except GpuQueryError:
            return None
    return parse_driver_version(text) if text else None


def busy(gpus: list[Gpu], idle_mib: float) -> list[Gpu]:
    """GPUs whose memory.used is above `idle_mib` (unknown memory counts as idle)."""
    return [gpu for gpu in gpus if gpu.memory_used_mib is not None and gpu.memory_used_mib > idle_mib]


def _expand(pattern: str) -> list[str]:
    paths = []
    for path in glob.glob(pattern):
        paths.extend(glob.glob(os.path.join(path, "*")) if os.path.isdir(path) else [path])
    return paths


def _nvidia_smi(args: list[str], timeout: float) -> str | None:
    tool = overrides.nvidia_smi()
    if tool is None:
        return None
    try:
        done = bounded.run([tool, *args], timeout)
    except bounded.Timeout:
        raise GpuQueryError(f"{tool} did not answer within {timeout:g}s (a GPU may be wedged)") from None
    except OSError as error:
        raise GpuQueryError(f"{tool}: {error}") from None
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip().splitlines()
        raise GpuQueryError(f"{tool} failed (exit {done.returncode}): {message[-1] if message else 'no output'}")
    return done.stdout


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None
