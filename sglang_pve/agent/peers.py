"""The TP-group peer watch: is every rank this one depends on still there?

SGLang's ranks join torch.distributed at tcp://<dist-init-addr> (sgl-project/sglang
python/sglang/srt/entrypoints/engine.py, commit 001067ff, Engine._launch_scheduler_processes:
every scheduler of every node gets the same address): global rank 0 serves the TCPStore on
the dist-init port and every other rank holds a TCP connection to it for its whole life. The
kernel closes a process's sockets when it dies, whatever killed it, so the connection is the
one thing a dead rank cannot keep up, and reading it needs no listener, no credentials and
nothing from the peer: this container's /proc/net/tcp and tcp6 (its own network namespace).

- rank 0 watches every other rank: connections to its dist-init port from that rank's address;
- a rank above 0 watches rank 0: its own connections to rank 0's address and dist-init port.

A rank is *gone* when it had at least one ESTABLISHED connection and now has none (a peer whose
end closed leaves ours in CLOSE_WAIT: not established). A rank that never connects is no peer
loss: the others wait silently in the rendezvous, which the gate's dist_init stall timeout ends.
A hung rank keeps its connection: its own gate (stall) or watchdog fails it, and then it is gone.

    watch = PeerWatch(spec.group)
    watch.gone()   # [] while every peer is connected; [1] once rank 1's connection closed
"""

import ipaddress
from collections.abc import Callable, Iterable
from typing import NamedTuple

from sglang_pve.agent.preflight_probe import tcp_address
from sglang_pve.agent.spec import Group

PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
_ESTABLISHED = "01"  # include/net/tcp_states.h TCP_ESTABLISHED, as /proc/net/tcp prints st


class Connection(NamedTuple):
    local: str
    local_port: int
    remote: str
    remote_port: int


def _address(hex_address: str) -> str:
    """/proc/net/tcp's address, an IPv4-mapped IPv6 one as IPv4."""
    address = ipaddress.ip_address(tcp_address(hex_address))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return str(address.ipv4_mapped)  # a dual-stack socket's IPv4 peer
    return str(address)


def parse(text: str) -> list[Connection]:
    """The ESTABLISHED connections of one /proc/net/tcp{,6} file."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _ESTABLISHED:
            continue
        (local, local_port), (remote, remote_port) = (f.split(":") for f in fields[1:3])
        found.append(Connection(_address(local), int(local_port, 16), _address(remote), int(remote_port, 16)))
    return found


def established(paths: Iterable[str] = PROC_NET_TCP) -> list[Connection]:
    connections = []
    for path in paths:
        try:
            with open(path, encoding="ascii") as handle:
                connections += parse(handle.read())
        except OSError:
            continue  # no IPv6 in this namespace
    return connections


def _canonical(address: str) -> str:
    return str(ipaddress.ip_address(address))


def connected(group: Group, connections: list[Connection]) -> dict[int, int]:
    """Connections per watched rank (Group.peers)."""
    port = group.dist_init_port
    counts = dict.fromkeys(group.peers, 0)
    for rank, address in group.peers.items():
        peer = _canonical(address)
        for c in connections:
            if group.rank == 0:
                counts[rank] += c.local_port == port and c.remote == peer
            else:
                counts[rank] += c.remote_port == port and c.remote == peer
    return counts


class PeerWatch:
    """Remembers which peers were connected; `gone()` names those no longer connected."""

    def __init__(
        self, group: Group, *, connected_now: bool = False, read: Callable[[], list[Connection]] = established
    ):
        """`connected_now`: every peer counts as seen already (after ready every rank has joined)."""
        self.group, self.read = group, read
        self.seen: set[int] = set(group.peers) if connected_now else set()

    def gone(self) -> list[int]:
        counts = connected(self.group, self.read())
        self.seen |= {rank for rank, n in counts.items() if n}
        return sorted(rank for rank in self.seen if not counts[rank])

    def describe(self, ranks: list[int]) -> str:
        group = self.group
        who = ", ".join(f"rank {r} ({group.addresses[r]})" for r in ranks)
        return (
            f"TP group {group.name}: {who} gone (its connection to the dist-init port {group.dist_init_port} "
            f"closed); this rank {group.rank} cannot go on without it, the group fails as one"
        )
