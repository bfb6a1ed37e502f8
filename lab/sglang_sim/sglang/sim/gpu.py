"""A simulated GPU, held by one process.

Holding: the process opens /dev/nvidia<N>, /dev/nvidiactl and /dev/nvidia-uvm with O_PATH, so
`ls -l /proc/PID/fd`, `fuser` and `lsof` see it as a GPU user exactly like CUDA's fds, although
no driver exists in the lab (a real open of the nodes gives ENXIO there). A real open is tried
first, so a device cgroup that denies the GPU (EPERM) fails the way CUDA init does.

Publishing: the process writes its simulated memory use and utilization to
<SGLANG_SIM_RUN_DIR>/gpus/<pid>.json, which the fake nvidia-smi sums per GPU.
"""

import errno
import json
import os
from pathlib import Path
from typing import List, Optional

from sglang.sim import env, procutil

# RTX PRO 6000 Blackwell Server Edition; keep in step with nvidia_smi.py.
TOTAL_MIB = 97887
TOTAL_GIB = TOTAL_MIB / 1024


def present_gpus() -> List[int]:
    """The N of every /dev/nvidia<N> this system has, sorted: the GPUs CUDA can open. A container
    given /dev/nvidia2 and /dev/nvidia3 of its node (container.gpus = [2, 3]) has two CUDA devices,
    numbered from 0 (as nvidia_smi.py's visible_gpus lists them)."""
    dev = Path(env.DEV_DIR.get())
    names = [p.name[len("nvidia") :] for p in dev.glob("nvidia[0-9]*")] if dev.is_dir() else []
    return sorted(int(n) for n in names if n.isdigit())


def physical_gpu(gpu_id: int) -> int:
    """Map a CUDA device ordinal through CUDA_VISIBLE_DEVICES (indices into the GPUs CUDA can
    open) to the /dev/nvidia<N> index."""
    present = present_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = list(range(len(present)))
    if visible:
        ids = [int(part) for part in visible.split(",") if part.strip().isdigit()]
    if gpu_id >= len(ids) or ids[gpu_id] >= len(present):
        raise RuntimeError("CUDA error: invalid device ordinal")
    return present[ids[gpu_id]]


def gpu_records_dir() -> Path:
    return Path(env.RUN_DIR.get()) / "gpus"


class GpuHolder:
    """One process's hold on one GPU: device fds plus its published usage."""

    def __init__(self, gpu_index: int, role: str):
        self.index = gpu_index
        self.role = role
        self.used_gib = 0.0
        self.utilization = 0
        self.phase = "init"
        self._fds: List[int] = []
        self._record = gpu_records_dir() / f"{os.getpid()}.json"

    @property
    def avail_gib(self) -> float:
        return TOTAL_GIB - self.used_gib

    def acquire(self) -> None:
        """Open the device nodes like a CUDA context does; raise CUDA-like errors."""
        dev = Path(env.DEV_DIR.get())
        for name in ("nvidiactl", "nvidia-uvm", f"nvidia{self.index}"):
            path = dev / name
            self._probe(path, is_gpu=name == f"nvidia{self.index}")
            self._fds.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
        self.publish()

    @staticmethod
    def _probe(path: Path, is_gpu: bool) -> None:
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC))
        except OSError as e:
            if e.errno == errno.ENXIO:  # node allowed, no driver behind it: the lab's case
                return
            if e.errno == errno.ENOENT and is_gpu:
                raise RuntimeError("CUDA error: invalid device ordinal") from None
            # Guess at torch's wording when CUDA cannot initialise (no/denied control nodes).
            raise RuntimeError("No CUDA GPUs are available") from None

    def publish(
        self, used_gib: Optional[float] = None, utilization: Optional[int] = None, phase: Optional[str] = None
    ) -> None:
        """Update and atomically rewrite this process's usage record."""
        if used_gib is not None:
            self.used_gib = used_gib
        if utilization is not None:
            self.utilization = utilization
        if phase is not None:
            self.phase = phase
        record = {
            "pid": os.getpid(),
            "starttime": procutil.start_time(os.getpid()),
            "gpu": self.index,
            "memory_used_mib": round(self.used_gib * 1024),
            "utilization_gpu": self.utilization,
            "role": self.role,
            "phase": self.phase,
        }
        self._record.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._record.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self._record)
