"""The LXC container on its Proxmox node, through the API (and SSH to the node for what the API
cannot write): created when absent; otherwise only the keys that differ are changed, sent with
the config digest; a snapshot first; raw lxc lines edited in the config file; started, or
restarted when it runs and something only applies at start (hotplug.py: a key PVE keeps in
[pve:pending], hostname, raw lines; or anything left pending by anyone); its SSH host key learnt
through the node and pinned, once its sshd listens again.

A restart owed is recorded on the node before the first write and cleared only after the reboot
task ended OK (restart_debt.py): a killed run or a failed reboot is restarted by the next run,
which says why. After a restart the container's own deploy reconnects (connector.py).

All reads happen when the operation is prepared (so --dry --diff shows the config diff and calls
no mutating endpoint); all writes happen in one callback when it executes.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation
from pyinfra.context import ctx_host

from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.proxmox import ContainerSpec
from sglang_pve.deploy import fleet
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.provision import conffile, desired, hostkeys, restart_debt, snapshot_storage, snapshots
from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.connector import restarted
from sglang_pve.provision.diff import ConfigDiff, creation_diff, diff_config
from sglang_pve.provision.node_facts import node_state
from sglang_pve.provision.nodes import Node
from sglang_pve.provision.restart_debt import Debt
from sglang_pve.provision.token_perm import token_refusals

HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"
HOST_KEY_WAIT_S = 120


@dataclass(frozen=True)
class Guest:
    """How the controller reaches the container once it runs (from the container host's data)."""

    ssh_hostname: str
    known_hosts: str
    public_keys: str | None = None  # authorized for root at create (ssh-public-keys)
    host_name: str = ""  # its inventory name: reconnected after a restart


@dataclass
class Plan:
    spec: ContainerSpec
    exists: bool
    running: bool
    diff: ConfigDiff
    current: dict  # GET .../config as read when planned (digest included)
    key_pinned: bool
    create: dict = field(default_factory=dict)
    debt: Debt | None = None  # a restart owed since an earlier run (restart_debt.py)
    rolled: str = ""  # a fleet member's: how its own deploy restarts it (fleet_restart.py), not its node

    @property
    def needs_restart(self) -> bool:
        return self.running and bool(self.debt or self.diff.restart_keys)

    @property
    def restart_reasons(self) -> list[str]:
        """Why it restarts: "restart owed since <when>: <keys>", "<keys> only apply at start"."""
        reasons = [self.debt.line()] if self.debt else []
        if self.diff.restart_keys:
            reasons.append(f"{', '.join(self.diff.restart_keys)} only apply at start")
        return reasons if self.needs_restart else []

    @property
    def reboots(self) -> bool:
        """Its node reboots it in this operation (a fleet member's restart is its own deploy's)."""
        return self.needs_restart and not self.rolled

    @property
    def idle(self) -> bool:
        return self.exists and self.running and self.diff.empty and self.key_pinned and not self.needs_restart


def plan(
    spec: ContainerSpec,
    node: Node,
    gpus: GpuDeviceInfo,
    guest: Guest,
    ssh_node: str | None = None,
    debt: Debt | None = None,
) -> Plan:
    """Read the node (cached for the run) and decide; raises ConfigError for anything refused.
    ``ssh_node``: the PVE node name of the SSH host the node's shell commands run on; ``debt``: the
    node's restarts owed (node_facts.py) entry for this container."""
    listed = node.containers().get(spec.vmid)
    wanted = desired.build(spec, gpus.gpu_indices, gpus.majors, guest.public_keys)
    problems = list(wanted.problems)
    if listed:
        current = node.config(spec.vmid)
        majors = {m for name, m in gpus.majors.items() if name.startswith("nvidia")} | {195}
        diff = diff_config(wanted, current, majors, node.pending(spec.vmid))
        problems += diff.refusals
    else:
        current = {}
        diff = creation_diff(wanted)
    if node.api.uses_token:
        problems += token_refusals(diff, spec.unprivileged)
    if not listed or not diff.empty:  # a change would be snapshotted first: can it be?
        problems += snapshot_storage.refusals(node, spec, current if listed else None)
    result = Plan(
        spec=spec,
        exists=bool(listed),
        running=listed is not None and listed.get("status") == "running",
        diff=diff,
        current=current,
        key_pinned=hostkeys.is_pinned(guest.known_hosts, guest.ssh_hostname),
        create={} if listed else wanted.create,
        debt=debt,
    )
    problems += _node_refusals(result, node, ssh_node)
    if problems:
        raise ConfigError(node.host_name, problems)
    return result


def _node_refusals(wanted: Plan, node: Node, ssh_node: str | None) -> list[Problem]:
    """A container PVE has locked (a `lock:` key: backup, migrate, snapshot, a half-done create...)
    takes no change; the config edit and pct exec run only on the container's own node."""
    problems, vmid = [], wanted.spec.vmid
    lock = wanted.current.get("lock")
    if lock and not wanted.idle:
        problems.append(
            Problem(
                "container.vmid",
                vmid,
                f"container {vmid} on node {node.name} is locked ({lock}): a PVE '{lock}' job owns its "
                "config and Proxmox refuses every change meanwhile (CT is locked); nothing was written",
                f"run again when that job has finished; only if you know it is gone (a crashed backup, "
                f"a half-done create), run `pct unlock {vmid}` on {node.name}, then run again",
            )
        )
    needs_shell = wanted.diff.raw_changed or not wanted.key_pinned or not wanted.exists
    if ssh_node is not None and ssh_node != node.name and needs_shell:
        problems.append(
            Problem(
                "proxmox_api.node",
                node.name,
                f"container {vmid} lives on node {node.name} (its API) but this SSH host is node {ssh_node} "
                f"(uname -n): its config file /etc/pve/nodes/{node.name}/lxc/{vmid}.conf is edited, and "
                "pct exec runs, only on the container's own node",
                f"point this inventory host's ssh_hostname at node {node.name}, or set proxmox_api.node "
                f"to {ssh_node} if that is the node meant",
            )
        )
    return problems


@operation()
def containers(members: list[tuple[ContainerSpec, Guest]], node: Node, gpus: GpuDeviceInfo, rolled: bool = False):
    """
    Make the containers of this Proxmox node what their specs say, and running: each planned (every
    problem of every container in one refusal, before any write), then all changed together: the
    node's creates are issued at once and awaited together, then its starts (PVE runs each task in
    its own worker; the config lock is per vmid: pve-container src/PVE/API2/LXC.pm create_vm,
    API2/LXC/Status.pm vm_start), then every host key pinned as each sshd comes up.

    + members: (spec, guest) of each container of the node: the validated ContainerSpec (host data
      ``container``) and Guest(ssh_hostname, known_hosts, public_keys): where its SSH host key gets pinned
    + node: the node's API (sglang_pve.provision.nodes.node_for)
    + gpus: the node's GpuDevices fact (which /dev/nvidiaN exist, the nvidia-uvm major)
    + rolled: the members' deploys follow in this run (deploy.py): a running replica or TP rank that
      must restart is restarted there, the fleet's way (provision/fleet_restart.py), not by its node;
      False (tasks/containers.py): such a restart is refused before any write (deploy/fleet.py)

    **Example:**

    .. code:: python

        containers(name="Containers of pve1", members=[(spec, Guest("10.0.0.129", "~/.ssh/known_hosts_pve"))],
                   node=node_for("pve1", host.data.dict()), gpus=host.get_fact(GpuDevices))
    """
    # uname -n, the restarts owed and every container's raw lxc.* lines: the node's one read of the
    # run (node_facts.py), so one API read per container (the raw lines are what GET .../pending lacks)
    read = node_state(ctx_host.get(), node)  # the Host itself: the `host` proxy is one object for every host
    ssh_node = read.hostname.split(".", 1)[0]  # PVE's nodename
    node.preload_raw(read.raw)
    batch, refusals = [], []
    for spec, guest in members:
        try:
            batch.append(
                (_fleet_aware(plan(spec, node, gpus, guest, ssh_node, read.debts.get(spec.vmid)), guest, rolled), guest)
            )
        except (ConfigError, ProxmoxError) as error:
            refusals.append(str(error))
    if refusals:
        raise OperationError("\n".join(refusals))
    for wanted, _ in batch:
        spec = wanted.spec
        if wanted.idle:
            host.noop(f"container {spec.vmid} ({spec.hostname}) up to date and running")
        elif state.config.DIFF:
            verb = "modify" if wanted.exists else "create"
            logger.info(f"{host.print_prefix}Will {verb} container {spec.vmid} ({spec.hostname}) on {node.name}")
            for line in wanted.diff.lines():
                logger.info(f"    {line}")
            for reason in wanted.restart_reasons:
                logger.info(f"    (restart: {reason})")
            if wanted.rolled:
                logger.info(f"    (restarted by its own deploy: {wanted.rolled})")
    changing = [(wanted, guest) for wanted, guest in batch if not wanted.idle]
    if changing:
        yield FunctionCommand(_apply_all, (node, changing), {})


@operation()
def container(spec: ContainerSpec, node: Node, gpus: GpuDeviceInfo, guest: Guest):
    """
    Make container ``spec.vmid`` on this Proxmox node what ``spec`` says, and running: ``containers``
    with one member.

    + spec: the validated ContainerSpec (host data ``container`` of the container's host)
    + node: the node's API (sglang_pve.provision.nodes.node_for)
    + gpus: the node's GpuDevices fact (which /dev/nvidiaN exist, the nvidia-uvm major)
    + guest: Guest(ssh_hostname, known_hosts, public_keys): where its SSH host key gets pinned

    **Example:**

    .. code:: python

        container(name="CT 129", spec=spec, node=node_for("pve1", host.data.dict()),
                  gpus=host.get_fact(GpuDevices), guest=Guest("10.0.0.129", "~/.ssh/known_hosts_pve"))
    """
    yield from containers._inner(members=[(spec, guest)], node=node, gpus=gpus)


@dataclass
class _Work:
    """One container of a node's batch as its writes go: the restart it owes, the first error."""

    wanted: Plan
    guest: Guest
    debt: Debt | None = None
    error: str | None = None


def _apply(state, host, node: Node, wanted: Plan, guest: Guest) -> bool:
    return _apply_all(state, host, node, [(wanted, guest)])


def _apply_all(state, host, node: Node, batch: list[tuple[Plan, Guest]]) -> bool:
    """Every write of every container of the batch, in an order that leaves nothing half applied
    on an API fault: per container the restart owed (on the node), snapshot, config (one PUT with
    the digest), root volume, raw lines, start/restart (then the restart owed cleared), host key;
    the oldest snapshots beyond snapshots_keep are deleted last, once all of it succeeded. Each
    step runs for every container still without an error; a container that fails one goes no
    further, the others go on, and every error is reported at the end."""
    works = [_Work(wanted, guest, wanted.debt) for wanted, guest in batch]
    for work in works:  # what the writes read, they read fresh (the plan's digest guards them)
        node.forget(work.wanted.spec.vmid)
    try:
        _converge(host, node, works)
    finally:
        for work in works:
            node.forget(work.wanted.spec.vmid)
    for work in works:
        if work.error:
            host.log_styled(work.error, fg="red", log_func=logger.error)
    return not any(work.error for work in works)


def _each(works: list[_Work], step: Callable[[_Work], None]) -> None:
    for work in works:
        if work.error is None:
            try:
                step(work)
            except (ProxmoxError, OperationError) as error:
                work.error = str(error)


def _issue(node: Node, works: list[_Work], task: Callable[[_Work], tuple | None]) -> dict[int, tuple[str, str]]:
    """Start ``task(work)`` = (method, path, parameters) for every container still without an
    error (None: none for it); {index: (UPID, call)} of those started."""
    started = {}
    for index, work in enumerate(works):
        call = task(work) if work.error is None else None
        if call is not None:
            method, path, params = call
            try:
                started[index] = (node.api.request(method, path, **params), f"{method} /{path}")
            except ProxmoxError as error:
                work.error = str(error)
    return started


def _await(node: Node, works: list[_Work], started: dict[int, tuple[str, str]]) -> None:
    for index, result in node.api.wait_all(started).items():
        if isinstance(result, ProxmoxError):
            works[index].error = str(result)


def _converge(host, node: Node, works: list[_Work]) -> None:
    api = node.api

    def owed(work: _Work) -> None:
        wanted, debt = work.wanted, work.debt
        if wanted.needs_restart and (debt is None or set(wanted.diff.restart_keys) - set(debt.keys)):
            work.debt = restart_debt.owed(wanted.diff.restart_keys, debt)
            command = restart_debt.record_command(node.debt_dir, wanted.spec.vmid, work.debt)
            _on_node(host, command, "recording the restart owed")

    def create(work: _Work) -> tuple | None:
        spec = work.wanted.spec
        if work.wanted.exists:
            return None
        host.log(f"creating container {spec.vmid} from {spec.template}", logger.info)
        return "POST", node.path(), work.wanted.create

    def modify(work: _Work) -> None:
        wanted = work.wanted
        spec, diff = wanted.spec, wanted.diff
        if not wanted.exists or diff.empty:
            return
        digest = wanted.current["digest"]
        if spec.snapshots_keep:
            snapshots.take(node, spec.vmid, "config", "before changing " + ", ".join(diff.keys))
            digest = _unchanged_since_planned(node, spec.vmid, wanted.current)
        if diff.put_parameters or diff.deleted or diff.reverted:
            _put(node, spec.vmid, diff, digest)
        if diff.resize_gb:
            api.run_task("PUT", node.path(spec.vmid, "resize"), disk="rootfs", size=f"{diff.resize_gb}G")

    def raw(work: _Work) -> None:
        wanted = work.wanted
        if wanted.diff.raw_changed:
            node.forget(wanted.spec.vmid)
            old = wanted.diff.raw_old if wanted.exists else []
            _edit_raw_lines(host, node, wanted.spec.vmid, old, wanted.diff.raw_new)

    def after(work: _Work) -> None:
        wanted = work.wanted
        if wanted.reboots and work.guest.host_name:
            restarted(work.guest.host_name)
        if wanted.exists and not wanted.diff.empty and wanted.spec.snapshots_keep:  # old rollback points go
            snapshots.prune(node, wanted.spec.vmid, wanted.spec.snapshots_keep)

    for work in works:
        if work.wanted.rolled:
            host.log(
                f"container {work.wanted.spec.vmid} owes a restart ({'; '.join(work.wanted.restart_reasons)}): "
                f"left to its own deploy: {work.wanted.rolled}",
                logger.info,
            )

    _each(works, owed)
    creating = _issue(node, works, create)  # the creates run while the changed containers change
    _each(works, modify)
    _await(node, works, creating)
    _each(works, raw)
    _started(host, node, works)
    _each(works, after)


def _started(host, node: Node, works: list[_Work]) -> None:
    """Started, or rebooted (then the restart owed cleared), and the host key pinned once sshd listens."""

    def start(work: _Work) -> tuple | None:
        wanted = work.wanted
        if wanted.reboots:
            host.log(f"restarting container {wanted.spec.vmid}: {'; '.join(wanted.restart_reasons)}", logger.info)
            return "POST", node.path(wanted.spec.vmid, "status", "reboot"), {}
        return None if wanted.running else ("POST", node.path(wanted.spec.vmid, "status", "start"), {})

    def cleared(work: _Work) -> None:
        if work.debt is not None and work.wanted.reboots:  # the start task ended OK: nothing is owed any more
            _on_node(
                host, restart_debt.clear_command(node.debt_dir, work.wanted.spec.vmid), "clearing the restart owed"
            )

    _await(node, works, _issue(node, works, start))
    _each(works, cleared)
    _pin_host_keys(host, [w for w in works if w.wanted.reboots or not w.wanted.running or not w.wanted.key_pinned])


def _fleet_aware(wanted: Plan, guest: Guest, rolled: bool) -> Plan:
    """A running replica or TP rank that must restart: its own deploy restarts it (`rolled`), or the
    run is refused before any write (deploy/fleet.py restart_problem: member, set or group, fix)."""
    if not wanted.needs_restart or not guest.host_name:
        return wanted
    inventory = getattr(state, "inventory", None)  # None: the operation driven without a run (tests)
    member = inventory.get_host(guest.host_name, default=None) if inventory is not None else None
    if member is None:
        return wanted
    problem = fleet.restart_problem(member, wanted.spec.vmid, wanted.restart_reasons, rolled)
    if problem is not None:
        raise ConfigError(member.name, [problem])
    return replace(wanted, rolled=fleet.restart_path(member) or "")


def restart(node_host, node: Node, wanted: Plan, guest: Guest) -> str | None:
    """A fleet member's restart, from its own deploy (fleet_restart.py), once it left its router or its
    group stopped: rebooted as its node's operation would (the task awaited, the restart owed cleared,
    the host key pinned, its connection renewed); the error, or None."""
    work = _Work(replace(wanted, rolled=""), guest, wanted.debt or restart_debt.owed([], None))
    node.forget(wanted.spec.vmid)  # the node's operation wrote the config meanwhile
    try:
        _started(node_host, node, [work])
    finally:
        node.forget(wanted.spec.vmid)
    if work.error is None and guest.host_name:
        restarted(guest.host_name)
    return work.error


def _on_node(host, command: StringCommand, doing: str) -> None:
    ok, output = host.run_shell_command(command)
    if not ok:
        raise OperationError(f"{doing} on {host.name} failed: {output.stderr.strip()}")


CONFLICT = (
    "the config changed since it was read (someone else edited it); nothing was overwritten: "
    "run again to review the new state"
)


def _unchanged_since_planned(node: Node, vmid: int, planned: dict) -> str:
    """The digest after our own snapshot (which rewrites the file), if nothing else changed the
    current config since it was planned; a conflict otherwise."""
    node.forget(vmid)
    fresh = node.config(vmid)
    if _settings(fresh) != _settings(planned):
        raise ProxmoxError(f"PUT /{node.path(vmid, 'config')}", f"not sent: {CONFLICT}")
    return fresh["digest"]


def _settings(config: dict) -> dict:
    """A config without what a snapshot itself changes (digest, parent); values as the config file
    has them (GET .../config types them, GET .../pending does not: cores 4 and "4" are the same)."""
    return {k: v if isinstance(v, list) else str(v) for k, v in config.items() if k not in ("digest", "parent")}


def _put(node: Node, vmid: int, diff: ConfigDiff, digest: str) -> None:
    try:
        node.api.request(
            "PUT",
            node.path(vmid, "config"),
            **diff.put_parameters,
            delete=",".join(diff.deleted) or None,
            revert=",".join(diff.reverted) or None,
            digest=digest,
        )
        if diff.deleted_after_revert:
            node.forget(vmid)
            node.api.request(
                "PUT",
                node.path(vmid, "config"),
                delete=",".join(diff.deleted_after_revert),
                digest=node.config(vmid)["digest"],
            )
    except ProxmoxError as error:
        if "detected modified configuration" in str(error):
            raise ProxmoxError(error.call, f"{error.message}: {CONFLICT}") from None
        raise


def _edit_raw_lines(host, node: Node, vmid: int, remove: list[str], add: list[str]) -> None:
    """conffile.py on the node, under PVE's config lock, through /etc/pve/nodes/<node>/lxc."""
    digest = node.config(vmid)["digest"]
    path = node.conf_path(vmid)
    request = {"vmid": vmid, "path": path, "lock": node.lock_path(vmid), "digest": digest, "remove": remove, "add": add}
    source = Path(conffile.__file__).read_text()
    command = StringCommand("python3", "-c", QuoteString(source), QuoteString(json.dumps(request)))
    ok, output = host.run_shell_command(command)
    if not ok:
        raise OperationError(f"editing {path} on {host.name} failed: {output.stderr.strip()}")


# The key once sshd listens (port 22 = 0x0016, state 0A = LISTEN): then the deploy can connect.
_KEY_WHEN_LISTENING = (
    "awk '$2 ~ /:0016$/ && $4 == \"0A\" {found = 1} END {exit !found}' /proc/net/tcp /proc/net/tcp6 "
    f"2>/dev/null && cat {HOST_KEY}"
)


def _pin_host_keys(host, works: list["_Work"]) -> None:
    """Read each container's host key through the node (pct exec: the node is trusted, the new
    container is not yet) once its sshd listens, then pin it for the address the inventory uses;
    the containers' sshds come up together, each one's key is pinned as it appears."""
    waiting = [w for w in works if w.error is None]
    deadline = time.monotonic() + HOST_KEY_WAIT_S
    while waiting:
        for work in list(waiting):
            vmid, guest = work.wanted.spec.vmid, work.guest
            ok, output = host.run_shell_command(
                StringCommand("pct", "exec", str(vmid), "--", "sh", "-c", QuoteString(_KEY_WHEN_LISTENING))
            )
            if ok and output.stdout.strip().startswith("ssh-"):
                waiting.remove(work)
                if hostkeys.pin(guest.known_hosts, guest.ssh_hostname, output.stdout.strip()):
                    host.log(
                        f"pinned the SSH host key of container {vmid} for {guest.ssh_hostname} in {guest.known_hosts}",
                        logger.info,
                    )
            elif time.monotonic() > deadline:
                waiting.remove(work)
                work.error = (
                    f"container {vmid}: no sshd listening with a {HOST_KEY} after {HOST_KEY_WAIT_S}s "
                    f"(pct exec: {output.stderr.strip() or 'nothing'}): is openssh-server in its template?"
                )
        if waiting:
            time.sleep(1)
