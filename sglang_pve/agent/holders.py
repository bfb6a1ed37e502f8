"""Processes that hold NVIDIA device nodes open, and whether they are ours.

This is what `fuser /dev/nvidia*` answers, without fuser: every /proc/PID/fd link is read, and a
link into the device glob (SGLANG_PVE_DEV_GLOB, default /dev/nvidia*) makes the process a holder.
Descriptors opened with O_PATH count too. Inside an LXC container nvidia-smi cannot name the
processes (the driver is not PID-namespace aware), so this is the only reliable view.

A holder is OURS when the environment it was started with has `SGLANG_PVE_UNIT=<unit_prefix>...`:
every server unit of this toolkit sets it, and SGLang's spawned schedulers inherit it. `unit` is
that value, so a caller can tell this unit's leftovers from another server's processes.

    [Holder(pid=4242, cmdline="sglang::scheduler_TP0", devices=("/dev/nvidia0", "/dev/nvidiactl"),
            ours=True, unit="sglang-baseline.service", start=123456)]
"""

import fnmatch
import os
from dataclasses import dataclass

from sglang_pve.agent import overrides, procs

UNIT_VARIABLE = "SGLANG_PVE_UNIT"


@dataclass(frozen=True)
class Holder:
    pid: int
    cmdline: str
    devices: tuple[str, ...]
    ours: bool
    unit: str | None  # SGLANG_PVE_UNIT of the process, if any
    start: int | None

    @property
    def proc(self) -> procs.Proc:
        return procs.Proc(self.pid, self.start)

    def describe(self) -> str:
        owner = f"unit {self.unit}" if self.ours else "foreign"
        return f"PID {self.pid} ({owner}): {self.cmdline or '?'} [holds {', '.join(self.devices)}]"

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "cmdline": self.cmdline,
            "devices": list(self.devices),
            "ours": self.ours,
            "unit": self.unit,
        }


def scan(unit_prefix: str, skip: tuple[int, ...] = ()) -> list[Holder]:
    """Every holder except this process and `skip`. Processes that vanish mid-scan are dropped."""
    pattern = overrides.device_glob()
    ignored = {os.getpid(), *skip}
    found = []
    for pid in procs.pids():
        if pid in ignored:
            continue
        devices = sorted({target for target in procs.fd_targets(pid) if fnmatch.fnmatchcase(target, pattern)})
        if not devices:
            continue
        proc = procs.identify(pid)
        if proc is None:
            continue  # exited while we looked
        unit = procs.environ_value(pid, UNIT_VARIABLE)
        ours = unit is not None and unit.startswith(unit_prefix)
        found.append(Holder(pid, procs.cmdline(pid), tuple(devices), ours, unit, proc.start))
    return found
