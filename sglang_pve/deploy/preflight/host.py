"""What the host must offer every server configuration: GPUs, a free port, and resource limits
that systemd can apply (a unit asking for more than PID 1 may grant fails with 205/LIMITS)."""

import dataclasses
import re

from sglang_pve.config import Problem, ServerConfig
from sglang_pve.config.deployment import UnitLimits
from sglang_pve.config.tp_group import TpRank
from sglang_pve.deploy import paths
from sglang_pve.deploy.facts.preflight import HostSnapshot, Listener

_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def gpus_needed(server: ServerConfig, tp: TpRank | None = None) -> int:
    """GPUs one node of the server uses: its share of tp-size (over the nodes of its TP group,
    `tp`, when it is that group's configuration), after base-gpu-id."""
    args = server.args
    nnodes = tp.nnodes if tp is not None and tp.server == server.name else 1
    return (args.base_gpu_id or 0) + -(-(args.tp_size or 1) // nnodes)


def with_given_gpus(snapshot: HostSnapshot, given: list[int] | None) -> tuple[HostSnapshot, str | None]:
    """The host as preflight judges it: with the GPUs its node gives it in this run (``given``: the
    /dev/nvidiaN indices of its container's GPU set, passed through before any of its own
    operations run: deploys/full.py orders the nodes' part first), not the ones it has now; and a
    line saying so when they differ (None: they do not, or ``given`` is None: not a provisioned
    container, or its node is not in this run).

    >>> now = HostSnapshot(gpus=["nvidia0", "nvidia1"])
    >>> judged, note = with_given_gpus(now, [0, 1, 2, 3])
    >>> judged.gpus
    ['nvidia0', 'nvidia1', 'nvidia2', 'nvidia3']
    >>> note
    'GPUs judged as the node passes them in this run: nvidia0 nvidia1 nvidia2 nvidia3 (now: nvidia0 nvidia1)'
    >>> with_given_gpus(now, [1, 0])[1] is None and with_given_gpus(now, None)[0] is now
    True
    """
    if given is None:
        return snapshot, None
    names = [f"nvidia{i}" for i in sorted(given)]
    if sorted(names) == sorted(snapshot.gpus):
        return snapshot, None
    now = " ".join(snapshot.gpus) or "none"
    note = f"GPUs judged as the node passes them in this run: {' '.join(names) or 'none'} (now: {now})"
    return dataclasses.replace(snapshot, gpus=names), note


def gpu_problems(servers: dict[str, ServerConfig], gpus: list[str], tp: TpRank | None = None) -> list[Problem]:
    if not gpus:
        return [
            Problem(
                "gpus",
                "/dev/nvidia[0-9]*",
                "the host has no NVIDIA GPU device nodes, so no server can start",
                "pass the GPUs through to the container (its `gpus` and `passthrough` keys, tasks/containers.py) "
                "and check the driver on the Proxmox node with nvidia-smi",
            )
        ]
    return [
        Problem(
            f"servers.{name}.tp-size",
            server.args.tp_size or 1,
            f"needs {gpus_needed(server, tp)} GPUs but the host has {len(gpus)} ({' '.join(gpus)})",
            f"set tp-size to at most {len(gpus) - (server.args.base_gpu_id or 0)}, or pass more GPUs through",
        )
        for name, server in servers.items()
        if gpus_needed(server, tp) > len(gpus)
    ]


def port(server: ServerConfig) -> int:
    return server.args.port or paths.SGLANG_DEFAULT_PORT


def ours(listener: Listener) -> bool:
    """Held by a process of one of this toolkit's units (their environment names the unit)."""
    return any((h.unit or "").startswith(paths.UNIT_PREFIX) for h in listener.holders)


def port_problems(servers: dict[str, ServerConfig], listeners: list[Listener]) -> list[Problem]:
    problems = []
    for name, server in servers.items():
        foreign = [x for x in listeners if x.port == port(server) and not ours(x)]
        if not foreign:
            continue
        where = " and ".join(
            f"[{x.address}]:{x.port}" if ":" in x.address else f"{x.address}:{x.port}" for x in foreign
        )
        holders = {h.pid: h for x in foreign for h in x.holders}
        who = (
            ", ".join(f"pid {h.pid} ({h.cmdline or h.comm})" for h in holders.values())
            or "a process the probe cannot see"
        )
        problems.append(
            Problem(
                f"servers.{name}.port",
                port(server),
                f"{where} {'is' if len(foreign) == 1 else 'are'} held by {who}, not by one of this toolkit's units",
                "stop that service, or give this server another port",
            )
        )
    return problems


def limit_value(value: int | str) -> int | None:
    """A systemd Limit*= value in bytes or a count; None for infinity. "8M" -> 8388608."""
    if isinstance(value, int):
        return value
    if value == "infinity":
        return None
    match = re.fullmatch(r"(\d+)([KMGT]?)", value)
    assert match is not None  # UnitLimits' pattern
    number, suffix = match.groups()
    return int(number) * _SUFFIX[suffix]


def limit_problems(limits: UnitLimits, snapshot: HostSnapshot) -> list[Problem]:
    if snapshot.cap_sys_resource and snapshot.init_userns:
        return []  # PID 1 may raise its hard limits
    if not snapshot.cap_sys_resource:
        why, grant = "PID 1 lacks CAP_SYS_RESOURCE", " or grant it CAP_SYS_RESOURCE"
    else:  # only the initial user namespace's CAP_SYS_RESOURCE lifts hard limits
        why, grant = (
            "PID 1 runs in a user namespace (unprivileged container), where CAP_SYS_RESOURCE cannot raise hard limits",
            "",
        )
    problems = []
    for name, requested in limits.model_dump().items():
        if name not in snapshot.limits:
            continue
        hard = snapshot.limits[name][1]
        wanted = limit_value(requested)
        if hard is not None and (wanted is None or wanted > hard):
            problems.append(
                Problem(
                    f"unit_limits.{name}",
                    requested,
                    f"above PID 1's hard limit {hard} and {why}, so systemd cannot apply it: every server unit "
                    "would fail to start with status 205/LIMITS",
                    f"lower unit_limits.{name} to at most {hard}, or raise the container's limit on the Proxmox node "
                    f"(lxc.prlimit.{name} in its config){grant}",
                )
            )
    return problems
