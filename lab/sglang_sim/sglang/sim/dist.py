"""Multi-node: SGLang's --nnodes / --node-rank / --dist-init-addr, and the rendezvous behind it.

Ranks per node, as sgl-project/sglang python/sglang/srt/entrypoints/engine.py (commit 001067ff)
Engine._launch_scheduler_processes has them through _calculate_rank_ranges: node `node_rank` runs
the TP ranks range(tp_per_node * node_rank, tp_per_node * (node_rank + 1)), tp_per_node =
tp_size // nnodes, each on GPU base_gpu_id + (tp_rank % tp_per_node) * gpu_id_step.

The rendezvous: every scheduler joins torch.distributed at tcp://<dist-init-addr> (SGLang's
model runner hands `--dist-init-addr` to init_distributed_environment as the init method), where
global rank 0 serves the TCPStore and every other rank connects and keeps its connection for the
process's life. Rank 0 waits on that port until every rank has joined (torch's own wait, bounded
by --dist-timeout; a guess at its message on expiry). The collectives that follow run over NCCL;
here they are barriers over the same connections, where SGLang has collectives during startup:
the KV pool sizing (the minimum free memory over all ranks), the CUDA graph capture and the
scheduler's ready. A peer whose connection closed, or that never comes, leaves the others
blocked in the collective, silent, GPU memory held: NCCL's hang (a guess at how long real NCCL
takes to notice: never, without NCCL_ASYNC_ERROR_HANDLING and a timeout).
"""

import logging
import socket
import threading
import time
from typing import Dict, List, Optional

logger = logging.getLogger(__name__)

CONNECT_RETRY_S = 0.5
DEFAULT_TIMEOUT_S = 1800  # torch.distributed's default init timeout (30 min)


def local_tp_ranks(tp_size: int, nnodes: int, node_rank: int) -> range:
    per_node = tp_size // nnodes
    return range(per_node * node_rank, per_node * (node_rank + 1))


def local_gpu_id(tp_rank: int, tp_size: int, nnodes: int, base_gpu_id: int, gpu_id_step: int) -> int:
    return base_gpu_id + (tp_rank % (tp_size // nnodes)) * gpu_id_step


def split_addr(addr: str) -> tuple:
    host, port = addr.rsplit(":", 1)
    return host.strip("[]"), int(port)


def _hang() -> None:
    threading.Event().wait()


class Rendezvous:
    """One rank's connections to its peers: rank 0 serves, every other rank is a client."""

    def __init__(self, addr: Optional[str], world_size: int, rank: int, timeout_s: Optional[float]):
        if not addr:  # guess: SGLang would rendezvous on a local port that the other nodes never reach
            raise ValueError("--dist-init-addr is required with --nnodes > 1")
        self.host, self.port = split_addr(addr)
        self.world_size, self.rank = world_size, rank
        self.timeout_s = timeout_s or DEFAULT_TIMEOUT_S
        self.peers: Dict[int, socket.socket] = {}  # rank 0: every other rank; others: {0: rank 0}
        self.listener: Optional[socket.socket] = None

    def join(self) -> None:
        if self.rank == 0:
            self._serve()
        else:
            self._connect()

    def _serve(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", self.port))
        listener.listen(64)
        self.listener = listener
        deadline = time.monotonic() + self.timeout_s
        while len(self.peers) < self.world_size - 1:
            listener.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                raise RuntimeError(
                    f"Timed out after {self.timeout_s:g} seconds waiting for clients. "
                    f"{len(self.peers) + 1}/{self.world_size} clients joined."
                ) from None
            conn.settimeout(None)
            rank = int(_read_line(conn) or -1)
            if rank > 0:
                self.peers[rank] = conn

    def _connect(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                conn = socket.create_connection((self.host, self.port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"The client socket has timed out after {self.timeout_s:g}s while trying to connect "
                        f"to ({self.host}, {self.port})."
                    ) from None
                time.sleep(CONNECT_RETRY_S)
        conn.settimeout(None)
        conn.sendall(f"{self.rank}\n".encode())
        self.peers[0] = conn

    def barrier(self, name: str) -> None:
        """A collective: every rank arrives, then all go on; a lost peer hangs it for good."""
        if self.rank == 0:
            for conn in self.peers.values():
                if _read_line(conn) != name:
                    _hang()
            for conn in self.peers.values():
                try:
                    conn.sendall(b"go\n")
                except OSError:
                    _hang()
        else:
            conn = self.peers[0]
            try:
                conn.sendall(f"{name}\n".encode())
            except OSError:
                _hang()
            if _read_line(conn) != "go":
                _hang()

    def lost(self) -> List[int]:
        """Peers whose connection closed (a non-blocking look; serving uses it before each batch)."""
        gone = []
        for rank, conn in self.peers.items():
            try:
                conn.setblocking(False)
                data = conn.recv(1, socket.MSG_PEEK)
                if data == b"":
                    gone.append(rank)
            except BlockingIOError:
                pass
            except OSError:
                gone.append(rank)
            finally:
                conn.setblocking(True)
        return gone


def _read_line(conn: socket.socket) -> Optional[str]:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(1)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data.decode().strip()
