"""The scheduling allowance of a lab test's time bound: how long this lab slot's guests were kept
waiting meanwhile, as the kernel counted it, instead of a guess at how loaded CI is.

CI runs three lab slots on 2 cores (load 10+): any step of a chain the agents record (a hang's last
progress, the gate's verdict, poststop's `stopped`) may wait seconds for a CPU. A bound from the
configured deadlines alone then fails on a loaded machine; one padded by a fixed guess no longer
catches a slow agent on an idle one. PSI (the kernel's Documentation/accounting/psi.rst) counts, per
cgroup, `some total=`: the microseconds during which at least one task in it was runnable but not
running (cpu), or stalled on IO or memory. Every guest of the slot lives under the slot's container
cgroup (lab/layout.py cgroup_dirs), so the sum of those totals over a window is the most any
sequential chain inside the slot can have been delayed by the machine in it: the allowance. On an
idle machine it is ~0 and the bound is the configured one.

    with SlotPressure() as pressure:              # samples every 0.2 s while the test waits
        ...
    pressure.waited(since, until)                 # seconds (epoch bounds, as the agents record)

Without PSI (a kernel built without it, or booted psi=0) `waited` is 0.0: the strict bound.
"""

import threading
import time
from pathlib import Path

from lab import layout

RESOURCES = ("cpu", "io", "memory")
SAMPLE_EVERY_S = 0.2


def slot_cgroup() -> Path | None:
    """The slot's container cgroup in the cgroup2 hierarchy (/sys/fs/cgroup on a cgroup2 host,
    /sys/fs/cgroup/unified on a hybrid one like this lab host), None without PSI files."""
    relative = Path(layout.cgroup_dirs("any")["container"]).parent  # sgpve<SLOT>.container
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (root / relative / "cpu.pressure").exists():
            return root / relative
    return None


def some_total_s(cgroup: Path) -> float:
    """Sum of the `some total=` microseconds of cpu, io and memory pressure, in seconds."""
    total = 0
    for resource in RESOURCES:
        try:
            first = (cgroup / f"{resource}.pressure").read_text().splitlines()[0]  # "some avg10=... total=N"
        except OSError:
            continue  # a resource without PSI here, or the cgroup gone with `lab down`
        total += int(first.rsplit("total=", 1)[1])
    return total / 1e6


class SlotPressure:
    """Samples (epoch, some_total_s) of the slot's cgroup on a thread while in the `with` block."""

    def __init__(self, cgroup: Path | None = None, every_s: float = SAMPLE_EVERY_S):
        self.cgroup = cgroup if cgroup is not None else slot_cgroup()
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        if self.cgroup is not None:
            self.samples.append((time.time(), some_total_s(self.cgroup)))

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> "SlotPressure":
        self._sample()  # at entry, before the block's first step: the window starts here
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def waited(self, since: float, until: float) -> float:
        """Seconds the slot's tasks waited within a window covering [since, until] (epoch): from the
        last sample at or before `since` to the first at or after `until` (the nearest ends when the
        window reaches past the samples), so the window is never shorter than asked."""
        if len(self.samples) < 2:
            return 0.0
        before = [total for stamp, total in self.samples if stamp <= since] or [self.samples[0][1]]
        after = [total for stamp, total in self.samples if stamp >= until] or [self.samples[-1][1]]
        return round(max(0.0, after[0] - before[-1]), 2)
