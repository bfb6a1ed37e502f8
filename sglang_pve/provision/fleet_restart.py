"""A container restart that provisioning owes a fleet member, done in the member's own deploy the
fleet's way (README "Replicas and TP groups: which task does what"; issue 17's follow-up).

Its node's operation (container.py) writes the change and records the restart owed as for any
container, but reboots only containers that serve alone: a replica rebooted there drops what its
router still sends it, and all the members of a set on one node would go down at once; a TP rank
rebooted alone breaks its group's collective. So the member's deploy, after the barrier that ends
every node's provisioning, runs `restart_owed` first under its deploy lock (a container restart is a
change: one run at a time; the restart ends the lock's holder, so the lock is taken again after it):

- a replica: once fewer than its set's max_unavailable members are out (rollout.begin, as a rolling
  switch), out of its router and drained (the agent's router-leave), rebooted through its node's API
  (the task awaited, the restart owed cleared, the host key pinned), then back in the router once
  the server its release runs has started at boot and passed its gate (router-join --wait-s); a
  replica whose reboot or return fails stops the rollout: the members still waiting stay as they are;
- a TP rank: when any rank of its group owes a restart, every rank stops its server (none goes on
  while another is down) before any container restarts; a restarted rank's server, which its boot
  starts, is stopped again, and the group switch of this run's servers task starts every rank
  together (group_switch.py: not every rank runs, so the whole group switches). Refused, before any
  change, when a rank is not in the run (fleet.group_problem).

Refused at plan time by the node's operation, before any write (fleet.restart_problem): a member's
restart in a run that does not deploy it (--limit left it out; tasks/containers.py).

    restart_owed(name="Restart provisioning owes, the fleet's way")     # container_deploy
"""

import functools
import weakref
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config.errors import ConfigError
from sglang_pve.config.safe import printable
from sglang_pve.deploy import fleet, group_switch, replicas, rollout
from sglang_pve.deploy.context import deployment
from sglang_pve.deploy.facts.lock import DeployLock
from sglang_pve.deploy.facts.releases import Releases
from sglang_pve.deploy.paths import unit_name
from sglang_pve.deploy.provenance import run_token, who
from sglang_pve.deploy.real_host import real_host
from sglang_pve.provision import container
from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.connector import node_host, validated_spec
from sglang_pve.provision.node_facts import node_state
from sglang_pve.provision.nodes import Node, node_for
from sglang_pve.provision.roles import guest_of

START_MARGIN_S = 60  # beyond the longest startup_timeout_s: the boot before the unit's start


@dataclass(frozen=True)
class Owed:
    """A fleet member's restart, as its node's operation planned it."""

    plan: container.Plan
    guest: container.Guest
    node: Node
    node_host: Any


_owed: "weakref.WeakKeyDictionary[object, Owed | None]" = weakref.WeakKeyDictionary()


def owed(member) -> Owed | None:
    """The restart `member`'s container owes in this run, read when first asked (at prepare: the
    plan its node's operation makes from the same reads) and kept for the run; None: none, no fleet
    member, its node not in the run, or refused (its node's operation says why)."""
    member = real_host(member)
    if member not in _owed:
        _owed[member] = _planned(member)
    return _owed[member]


def _planned(member) -> Owed | None:
    try:
        spec = validated_spec(member)
        at = node_host(member, spec) if spec is not None else None
        if spec is None or at is None or not at.connected or fleet.place(member) is None:
            return None
        node = node_for(at.name, at.data.dict())
        if (node.containers().get(spec.vmid) or {}).get("status") != "running":
            return None  # only a running container restarts (a new one starts: its node's)
        read = node_state(at, node)
        node.preload_raw(read.raw)
        guest = guest_of(member)
        ssh_node = read.hostname.split(".", 1)[0]
        wanted = container.plan(spec, node, read.gpus, guest, ssh_node, read.debts.get(spec.vmid))
    except (ConfigError, ProxmoxError, PyinfraError):
        return None  # its node's operation refuses it, naming why
    return Owed(wanted, guest, node, at) if wanted.needs_restart else None


def _due(member) -> Owed | None:
    """owed(member), unless its node's operation failed in this run (its writes may not have happened:
    the restart stays owed on the node for the next run)."""
    found = owed(member)
    return None if found is None or found.node_host in state.failed_hosts else found


SCOPE = "restart"  # its TP ranks' books (group_switch.py), apart from the release operation's


@operation(is_idempotent=False)
@functools.partial(group_switch.taking_part, scope=SCOPE)
def restart_owed():
    """
    The restart a replica's or a TP rank's container owes from provisioning, the fleet's way (the
    module's docstring): a replica out of its router meanwhile, max_unavailable of its set at a time;
    every rank of a TP group stopped before any container restarts. Nothing for a container alone
    (its node rebooted it) or one that owes nothing.

    **Example:**

    .. code:: python

        restart_owed(name="Restart provisioning owes, the fleet's way")
    """
    where = fleet.place(host)
    mine = _due(host)
    if isinstance(where, fleet.Rank):
        yield from _rank(where, mine)
        return
    if mine is None:
        host.noop("no container restart owed")
        return
    why = "; ".join(mine.plan.restart_reasons)
    if not state.is_executing:
        yield _said(f"would restart container {mine.plan.spec.vmid} ({why}): {fleet.restart_path(host)}")
        return
    wait_s = max((s.lifecycle.startup_timeout_s for s in deployment().servers.values()), default=0) + START_MARGIN_S
    yield from rollout.switching(
        host, lambda routed: FunctionCommand(_replica, (mine, routed, wait_s), {}), restart=True
    )


def _rank(where: "fleet.Rank", mine: Owed | None):
    rank = group_switch.member(host, SCOPE)
    assert rank is not None
    owing = sorted(replicas.short(p.name) for p in (rank.host, *rank.peers) if _due(p))
    if not owing:
        host.noop(f"no rank of TP group {where.group} owes a container restart")
        return
    alone = fleet.group_problem(host, "a container restart")
    if alone is not None:
        yield rollout.refused_step(alone.render(host.name))
        return
    report = host.get_fact(Releases)
    current = report.current_record
    units = sorted(
        {*report.running, *([unit_name(current["active_server"])] if current and current["active_server"] else [])}
    )
    said = f"TP group {where.group}: every rank stops before {', '.join(owing)} restart(s)"
    if not state.is_executing:
        yield _said(
            f"would stop {', '.join(units) or 'nothing'} ({said}); "
            + (f"restart container {mine.plan.spec.vmid} ({'; '.join(mine.plan.restart_reasons)}); " if mine else "")
            + "the group switch of the servers task starts every rank together"
        )
        return
    yield from rank.stopped_together(units)
    if mine is not None:
        yield FunctionCommand(_reboot, (mine,), {})
        if units:  # its boot starts its server alone: stopped, the group switch starts every rank together
            yield StringCommand("systemctl", "stop", "--", *units)


def _said(text: str) -> FunctionCommand:
    """At prepare (--dry): what the run would do, shown in the plan; at execution it would say it again."""
    logger.info(f"{host.print_prefix}{text}")
    return FunctionCommand(_noop, (), {})


def _noop(state, host) -> bool:
    return True


def _reboot(state, host, due: Owed) -> bool:
    """Through its node (which says `restarting container N: why`); then this run's deploy lock taken
    again: the restart ended its holder (the kernel let go of its flock, agent/lease.py), and what
    follows in the deploy changes the container under it."""
    error = container.restart(due.node_host, due.node, due.plan, due.guest)
    if error is not None:
        host.log_styled(error, fg="red", log_func=logger.error)
        return False
    wait_s = deployment().data.wait_lock
    locked = host.get_fact(DeployLock, token=run_token(), owner=who(), task="deploy", wait_s=wait_s)
    if not locked.held:
        host.log_styled(f"after the restart: {printable(locked.message)}", fg="red", log_func=logger.error)
    return locked.held


def _replica(state, host, due: Owed, routed: list, wait_s: int) -> bool:
    """Out of the router and drained, rebooted, back once its server started at boot; on a failed
    reboot it still goes back (what ran before still runs), and the operation fails."""
    if not rollout.router_step(host, "router-leave", routed):
        host.log_styled("not restarted: it could not leave its router (above)", fg="red", log_func=logger.error)
        return False
    rebooted = _reboot(state, host, due)
    back = rollout.router_step(host, "router-join", routed, "--wait-s", str(wait_s))
    return rebooted and back
