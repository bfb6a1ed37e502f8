"""Fault `leak_child`: a GPU-holding process that outlives the server.

`spawn_leaked_child` runs `python -m sglang.sim.leak GPU GIB` in a new session; that process
forks once more and exits, so the grandchild is reparented to init at once (double fork). The
grandchild has no parent-death signal, ignores SIGTERM, keeps /dev/nvidia* open (O_PATH) and
publishes its GPU memory until it is SIGKILLed. It stays in the server's cgroup, so systemd's
cgroup kill on stop still reaches it; a kill that bypasses the cgroup (kill of the main PID,
SGLang's own kill_process_tree) leaves it holding the GPU.
"""

import os
import signal
import subprocess
import sys

from sglang.sim.gpu import GpuHolder


def spawn_leaked_child(gpu_index: int, used_gib: float) -> None:
    """Start the escaping process; returns once it has detached."""
    subprocess.run(
        [sys.executable, "-m", "sglang.sim.leak", str(gpu_index), str(used_gib)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        check=True,
    )


def main(argv: list) -> None:
    gpu_index, used_gib = int(argv[0]), float(argv[1])
    if os.fork():
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    holder = GpuHolder(gpu_index, role="leak")
    holder.acquire()
    holder.publish(used_gib=used_gib, phase="leaked")
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
