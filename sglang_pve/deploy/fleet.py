"""What a task that stops and starts a container's server may do on a member of the fleet (issue 17).

A replica serves behind its set's router, a TP rank is one part of a server spread over containers
on several nodes: restarted alone, the first drops the requests its router still sends it, the
second breaks its group's collective (the other ranks wait on it). So every such task goes the
deploy's way, or is refused before it changes anything, naming the member, its set or group and
what to run instead (README "Replicas and TP groups: which task does what"):

    task                          alone           replica-set member               TP group rank
    deploy.py, tasks/servers.py,  atomic switch   rolling (rollout.py: out of the  all ranks together
    tasks/switch.py, tasks/                       router through its worker API,   (group_switch.py); refused
    rollback.py (release mode)                    drained, switched, gated, back)  unless every rank is in
                                                                                   the run
    tasks/bench.py (promote=1)    as it is        out of the router for the whole  refused
                                                  bench, back after (the others
                                                  serve); a winner is the set's:
                                                  written for every member, the
                                                  next deploy rolls the set to it
    tasks/rollback.py snapshot    as it is        refused                          refused
    provisioning's restart        its node        out of the router, rebooted,     every rank stopped first,
    (deploy.py; provision/        reboots it      back, max_unavailable at a time  the group switch starts
    fleet_restart.py)                                                              them; refused unless every
                                                                                   rank is in the run
    tasks/containers.py           its node        refused                          refused

    place(host)                   # Replica | Rank | None (alone)
    group_problem(host, task)     # a TP rank whose group is not all in this run: the Problem, else None
    bench_problem(host)           # a TP rank: the bench cannot measure it
    snapshot_problem(host)        # a replica or a TP rank: a snapshot rollback restarts it alone
    restart_path(host)            # how provisioning's container restart goes for a member (None: alone)
    restart_problem(host, ...)    # a member's container restart this run cannot do the fleet's way
    refused(host, problem)        # the PyinfraError that fails the host with it
"""

from dataclasses import dataclass

from pyinfra import state
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config import ConfigError, Problem
from sglang_pve.config.replica_set import ReplicaSet
from sglang_pve.deploy import group_switch, replicas


@dataclass(frozen=True)
class Replica:
    name: str  # the set's
    replica_set: ReplicaSet
    member: str


@dataclass(frozen=True)
class Rank:
    group: str
    members: tuple[str, ...]  # short names, in rank order
    member: str

    @property
    def rank(self) -> int:
        return self.members.index(self.member)

    @property
    def said(self) -> str:
        ranks = ", ".join(f"{m} rank {i}" for i, m in enumerate(self.members))
        return f"{self.member} is rank {self.rank} of TP group {self.group} ({ranks})"

    @property
    def limits(self) -> str:
        return " ".join(f"--limit {m}" for m in self.members)


def place(host) -> Replica | Rank | None:
    """Where `host` serves: in a TP group (checked first: its ranks are bound tighter than a set's
    replicas), in a replica set, or alone (None)."""
    member = replicas.short(host.name)
    group = group_switch.group_of(host)
    if group is not None:
        return Rank(group[0], tuple(group[1]), member)
    data = getattr(host, "data", None)
    found = replicas.member_of(host) if data is not None and data.get("replica_sets") else None
    return Replica(found[0], found[1], member) if found is not None else None


def _in_run(member: str) -> bool:
    """The member's host is in this run: in the inventory, inside --limit, and not failed already."""
    return any(
        replicas.short(h.name) == member and state.is_host_in_limit(h) and h not in state.failed_hosts
        for h in state.inventory
    )


def group_problem(host, task: str) -> Problem | None:
    """A TP rank whose switch would run without every other rank of its group (--limit left one
    out, or it failed earlier in the run): group_switch.py waits only for the ranks in the operation."""
    where = place(host)
    if not isinstance(where, Rank):
        return None
    missing = [m for m in where.members if m != where.member and not _in_run(m)]
    if not missing:
        return None
    return Problem(
        f"tp_groups.{where.group}.members",
        list(where.members),
        f"{where.said}: its ranks stop and start together (sglang_pve/deploy/group_switch.py) and "
        f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in this run; "
        f"{task} on one rank alone breaks the group (the other ranks wait on it)",
        f"include every rank of {where.group}: {where.limits} (or no --limit)",
    )


def bench_problem(host) -> Problem | None:
    """A TP rank: the bench starts one container's server per configuration, a rank cannot start alone."""
    where = place(host)
    if not isinstance(where, Rank):
        return None
    return Problem(
        f"tp_groups.{where.group}",
        list(where.members),
        f"{where.said}: tasks/bench.py starts one container's server per configuration and a rank "
        "cannot start alone (the other ranks wait on it); the bench measures one container or one replica",
        f"bench without the group's ranks (--limit the other hosts); compare the group's configurations by "
        f"switching every rank together: tasks/switch.py --data server=NAME {where.limits}",
    )


def snapshot_problem(host) -> Problem | None:
    """A replica or a TP rank: a snapshot rollback stops and starts its container alone."""
    where = place(host)
    if isinstance(where, Rank):
        return Problem(
            f"tp_groups.{where.group}.members",
            list(where.members),
            f"{where.said}: a snapshot rollback stops and starts this container alone (the other ranks wait on it)",
            f"roll back the group's release on every rank together: tasks/rollback.py {where.limits}; or take "
            f"{where.member} out of tp_groups.{where.group} first",
        )
    if isinstance(where, Replica):
        return Problem(
            f"replica_sets.{where.name}.members",
            list(where.replica_set.members),
            f"{where.member} serves in replica set {where.name} behind its router on "
            f"{where.replica_set.router.host}: a snapshot rollback stops and starts its container while "
            "the router still sends it requests",
            f"roll back its release instead: tasks/rollback.py --limit {where.member} (out of the router, "
            f"drained, switched, gated, back in); or take {where.member} out of replica_sets.{where.name} first",
        )
    return None


def restart_path(host) -> str | None:
    """How the restart its container owes goes for a fleet member (provision/fleet_restart.py does it
    in the member's own deploy); None for a container alone (its node reboots it)."""
    where = place(host)
    if isinstance(where, Rank):
        return (
            f"{where.said}: every rank of {where.group} stops before its container restarts, and this run's "
            "group switch starts them together (in its deploy)"
        )
    if isinstance(where, Replica):
        return (
            f"{where.member} serves in replica set {where.name}: out of its router on {where.replica_set.router.host} "
            f"and drained first, back once its server is ready, {where.replica_set.max_unavailable} of the set at "
            "a time (in its deploy)"
        )
    return None


def restart_problem(host, vmid: int, reasons: list[str], rolled: bool) -> Problem | None:
    """A fleet member whose container owes a restart that this run cannot do the fleet's way:
    `rolled` False (a task that provisions without the members' deploys: tasks/containers.py), the
    member left out of the run, or a rank whose group is not all in it. None: alone, or it can."""
    where = place(host)
    if where is None:
        return None
    why = f"container {vmid} ({where.member}) must restart ({'; '.join(reasons)})"
    if isinstance(where, Rank):
        key, value, said = f"tp_groups.{where.group}.members", list(where.members), where.said
        whole = _with_nodes(where.members)
    else:
        key, value = f"replica_sets.{where.name}.members", list(where.replica_set.members)
        said = f"{where.member} serves in replica set {where.name} behind its router on {where.replica_set.router.host}"
        whole = _with_nodes((where.member,))
    if not rolled:
        return Problem(
            key,
            value,
            f"{why}; {said}: restarted by its node alone it breaks "
            f"{'its group (the other ranks wait on it)' if isinstance(where, Rank) else 'what its router sends it'}, "
            "and this task runs no member's deploy, which restarts it the fleet's way",
            f"run deploy.py instead (its restart goes out of the router, or group-wide): {whole}",
        )
    if not _in_run(where.member):
        return Problem(
            key,
            value,
            f"{why}; {said}: its own deploy restarts it the fleet's way, and {where.member} is not in this run",
            f"include it: {whole} (or no --limit)",
        )
    alone = group_problem(host, "a container restart")
    if alone is not None:
        return Problem(alone.key, alone.value, f"{why}; {alone.message}", alone.fix)
    return None


def _with_nodes(members: tuple[str, ...]) -> str:
    """--limit for the members and their Proxmox nodes (host data container.node), nodes first."""
    nodes = []
    for member in members:
        found = [h for h in state.inventory if replicas.short(h.name) == member]
        container = found[0].data.get("container") if found else None
        node = container.get("node") if isinstance(container, dict) else None
        if node and node not in nodes:
            nodes.append(node)
    return " ".join(f"--limit {name}" for name in (*nodes, *members))


def refused(host, problem: Problem) -> PyinfraError:
    """The error that fails `host` with `problem`, printed plainly (no traceback)."""
    return PyinfraError(str(ConfigError(host.name, [problem])))
