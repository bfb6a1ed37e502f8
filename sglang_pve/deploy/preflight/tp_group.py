"""Preflight of a TP group member (config/tp_group.py): what only the hosts can answer.

On each member, from its own probe: rank 0's dist-init port is free for SGLang (no foreign
listener), and a rank above 0 reaches rank 0's dist-init address (a TCP connect that is
answered, refused included: nothing listens there before rank 0 starts; a timeout or an
unreachable network is a firewall or routing problem that would leave every rank waiting in
the rendezvous). Across the members (`RankFacts`, compared by sglang_pve/deploys/preflight.py as
each member's probe comes in): the exact SGLang build the deploy installs (a nightly resolved
on each member) and the model's config.json on the host (its hash) are the same on every rank.
The NCCL profile and tp-size = the sum of the GPUs are checked in the configuration already
(config/tp_group.py): every rank renders the same profile.
"""

import hashlib
import json
from dataclasses import dataclass

from sglang_pve.config import Deployment, Problem
from sglang_pve.config.tp_group import TpRank
from sglang_pve.deploy.facts.preflight import HostSnapshot
from sglang_pve.deploy.preflight.host import ours


def reach_targets(tp: TpRank | None) -> tuple[tuple[str, int], ...]:
    """What a member's probe must reach: rank 0's dist-init address, from every other rank."""
    return ((tp.addresses[0], tp.dist_init_port),) if tp is not None and tp.rank > 0 else ()


def member_problems(tp: TpRank, snapshot: HostSnapshot) -> list[Problem]:
    key = f"tp_groups.{tp.group}.dist_init_port"
    problems = []
    if tp.rank == 0:
        foreign = [x for x in snapshot.listeners if x.port == tp.dist_init_port and not ours(x)]
        if foreign:
            who = ", ".join(f"pid {h.pid} ({h.cmdline or h.comm})" for x in foreign for h in x.holders) or "a process"
            problems.append(
                Problem(
                    key,
                    tp.dist_init_port,
                    f"rank 0 serves the group's rendezvous on it, but {who} listens there",
                    "stop that service, or give the group another dist_init_port",
                )
            )
    for target, error in snapshot.reach.items():
        if error is not None:
            problems.append(
                Problem(
                    key,
                    tp.dist_init_port,
                    f"rank {tp.rank} cannot reach rank 0's dist-init address {target} ({error}): "
                    "every rank would wait in the rendezvous",
                    f"let TCP port {tp.dist_init_port} through from this container to {target.rsplit(':', 1)[0]}",
                )
            )
    return problems


@dataclass(frozen=True)
class RankFacts:
    """What every rank of a group must have the same of, as one member's probe read it."""

    host: str
    rank: int
    sglang: str  # the exact build the deploy installs there
    model_config_sha256: str | None


def rank_facts(host: str, deployment: Deployment, snapshot: HostSnapshot) -> RankFacts | None:
    tp = deployment.tp
    if tp is None:
        return None
    model = snapshot.models.get(deployment.servers[tp.server].args.model_path)
    config = model.config if model is not None else None
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest() if config is not None else None
    return RankFacts(host, tp.rank, deployment.sglang_version, digest)


def disagreement(tp: TpRank, mine: RankFacts, others: list[RankFacts]) -> list[Problem]:
    """Problems of `mine` against the other members' facts read so far."""
    problems = []
    for other in others:
        for name, what in (("sglang", "SGLang builds"), ("model_config_sha256", "model config.json (sha256)")):
            if getattr(mine, name) != getattr(other, name):
                problems.append(
                    Problem(
                        f"tp_groups.{tp.group}.members",
                        f"rank {mine.rank}: {getattr(mine, name)}, rank {other.rank} ({other.host}): "
                        f"{getattr(other, name)}",
                        f"the ranks' {what} differ: SGLang loads the same model on every rank",
                        "give every member the same SGLang build and the same model files, then deploy again",
                    )
                )
    return problems
