"""The server's sandbox: ONE list of systemd properties, for the unit's [Service] section
(templates/sglang-server.service.j2) and the preflight judge's `systemd-run -p NAME=VALUE`
(sglang_pve/agent/preflight_probe.py gets them in its spec, from deploy/preflight's judge_sandbox),
so the judge, which runs SGLang's parser and with it a model's remote code, is held exactly as the
server is (tests/lab/test_sandbox.py). Add a hardening property here, not in the template.

    identity("sglang", ["video"])  # [("User", "sglang"), ("DynamicUser", "yes"), ("SupplementaryGroups", "video")]
    PROPERTIES[:2]                 # (("UMask", "0077"), ("NoNewPrivileges", "yes"))

Every property must be settable on a transient unit too (systemd-run's bus_append_execute_property,
src/shared/bus-unit-util.c in systemd/systemd; the lab test runs it). Values are literal systemd
syntax: no specifiers, no quoting needed.
"""

import ipaddress
from collections.abc import Iterable

# A DynamicUser's UID: allocated by systemd unless a static user of that name exists; the judge
# of a root server ("root" asked for explicitly) still runs as one of these, never as root.
JUDGE_USER = "sglang-pve-judge"

PROPERTIES: tuple[tuple[str, str], ...] = (
    ("UMask", "0077"),
    ("NoNewPrivileges", "yes"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("SystemCallArchitectures", "native"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK"),  # NETLINK: getifaddrs (NCCL, gloo)
    # The process tree: only its own processes (hidepid=invisible), no /proc file but the
    # processes' (subset=pid: no /proc/sys, /proc/meminfo...); the toolkit's reaper, gate and status
    # read the server's /proc as root outside this namespace (ExecStart*=+, SSH), so they see all.
    ("ProtectProc", "invisible"),
    ("ProcSubset", "pid"),
    ("PrivateIPC", "yes"),  # SysV IPC and POSIX queues of its own (NCCL's shared memory is /dev/shm files)
    ("PrivateMounts", "yes"),
    # The system calls of a system service (systemd-analyze syscall-filter @system-service); any
    # other fails with EPERM rather than killing a server mid-request. A test of tests/gpu runs
    # CUDA, Triton and NCCL under this filter on a real GPU.
    ("SystemCallFilter", "@system-service"),
    ("SystemCallErrorNumber", "EPERM"),
    # No IP traffic but with the addresses ip_allow() names (the unit's IPAddressAllow=). A cgroup BPF
    # program enforces it: systemd loads one in a privileged container (the lab's, inventory/lab.py;
    # tests/lab/test_deploy.py sees the node's API and SSH dropped from inside the unit), not in an
    # unprivileged one, whose root may not load BPF where kernel.unprivileged_bpf_disabled is set
    # (Debian's and Ubuntu's default): there systemd runs the unit without it (systemd/systemd
    # src/core/bpf-firewall.c, bpf_firewall_supported).
    ("IPAddressDeny", "any"),
)
# The systemd release that introduced a property (systemd's NEWS, "CHANGES WITH 247/248"): on an
# older systemd a unit file's unknown key is ignored with a warning and systemd-run refuses it, so
# for_systemd() leaves it out. Every other property predates the oldest systemd of a supported
# distribution (Debian 11: 247; Debian 12: 252; Ubuntu 24.04: 255).
SINCE = {"ProtectProc": 247, "ProcSubset": 247, "PrivateIPC": 248}


def for_systemd(version: int | None) -> tuple[tuple[str, str], ...]:
    """PROPERTIES a host's systemd knows (None: not known, all of them)."""
    return tuple(p for p in PROPERTIES if version is None or SINCE.get(p[0], 0) <= version)


def ip_allow(addresses: Iterable[str], clients: Iterable[str]) -> tuple[str, str]:
    """IPAddressAllow= of a server: the loopback, the host's own addresses (its bind, and the
    addresses its ranks bootstrap NCCL and gloo over: the first non-loopback interface), its peers'
    (a TP group's members, config/tp_group.py) and the networks its clients are in
    (server_clients). The node (its API, SSH) is none of these unless server_clients names it."""
    networks = dict.fromkeys(ipaddress.ip_network(item) for item in (*addresses, *clients))
    words = [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n) for n in networks]
    return ("IPAddressAllow", " ".join(["localhost", *words]))


def identity(user: str, groups: list[str]) -> list[tuple[str, str]]:
    """Who the sandboxed process is: a dedicated (dynamic) user and its supplementary groups."""
    return [("User", user), ("DynamicUser", "yes")] + ([("SupplementaryGroups", " ".join(groups))] if groups else [])


def is_address(value: str) -> bool:
    """An IP address literal: what an allow list can name (a host name cannot be)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
