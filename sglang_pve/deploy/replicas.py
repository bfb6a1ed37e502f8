"""The inventory's replica sets (config/replica_set.py), checked across hosts once per run, and the
URLs the router and its workers are reached at.

    replica_sets()            # {name: ReplicaSet}, every set checked against every host it names
    member_of(host)           # (name, ReplicaSet) of the set the host serves in, or None
    worker_url(host)          # "http://10.200.0.11:30000": the replica's active server
    router_url(replica_set)   # "http://10.200.0.14:30000"
"""

import os
from pathlib import Path

from pyinfra import state
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config import ConfigError, Problem, load_deployment
from sglang_pve.config.deployment import HostData
from sglang_pve.config.proxmox import load_container
from sglang_pve.config.replica_set import Member, ReplicaSet, replica_set_problems, sets_of
from sglang_pve.deploy import paths

_checked: dict[int, dict[str, ReplicaSet]] = {}


def _project() -> Path:
    return Path(state.cwd or os.getcwd())


def short(name: str) -> str:
    """`@pveguest/sglang2` -> `sglang2`: sets name their hosts like the container hosts are named."""
    return name.rsplit("/", 1)[-1]


def named_host(name: str):
    """The inventory host a set names (`router1` is `@pveguest/router1`)."""
    found = [h for h in state.inventory if short(h.name) == name]
    if not found:
        raise PyinfraError(f"replica_sets: {name} is no host of the inventory")
    return found[0]


def _member(inventory_host) -> Member:
    data = inventory_host.data.dict()
    try:
        container = load_container(inventory_host.name, data) is not None
    except ConfigError:
        container = True  # its own deploy reports what is wrong with it
    try:
        config = load_deployment(inventory_host.name, data, _project())
    except ConfigError:
        return Member(container, None, None)
    active = config.servers.get(config.data.active_server or "")
    model = str(active.args.model_path) if active else None
    return Member(container, config.sglang_version, model)


def replica_sets() -> dict[str, ReplicaSet]:
    """The validated sets (the first host's view: every host has the same `replica_sets`); a
    problem anywhere stops the run before any remote change, every problem named at once."""
    key = id(state)
    if key not in _checked:
        hosts = list(state.inventory)
        sets: dict[str, ReplicaSet] = {}
        problems: list[Problem] = []
        for inventory_host in hosts:
            try:
                data = HostData.model_validate(inventory_host.data.dict())
            except Exception:  # noqa: BLE001 - the host's own deploy reports its data
                continue
            if sets and data.replica_sets != sets:
                names = ", ".join(sorted(data.replica_sets)) or "none"
                problems.append(
                    Problem(
                        "replica_sets",
                        names,
                        f"{inventory_host.name} has other replica sets than {hosts[0].name}",
                        "define replica_sets once for every host (group_data/all.py or an inventory group)",
                    )
                )
                continue
            sets = data.replica_sets
        named = {name for rs in sets.values() for name in [*rs.members, rs.router.host]}
        members = {short(h.name): _member(h) for h in hosts if short(h.name) in named}
        for name, replica_set in sorted(sets.items()):
            problems += replica_set_problems(name, replica_set, members)
        seen: dict[str, str] = {}
        for name, replica_set in sorted(sets.items()):
            for member in replica_set.members:
                if member in seen:
                    problems.append(
                        Problem(
                            f"replica_sets.{name}.members",
                            member,
                            f"is also a member of {seen[member]}",
                            "a container serves in one replica set",
                        )
                    )
                seen[member] = name
        if problems:
            raise PyinfraError(str(ConfigError("replica_sets", problems)))
        _checked[key] = sets
    return _checked[key]


def member_of(host) -> tuple[str, ReplicaSet] | None:
    sets = replica_sets()
    names, _ = sets_of(sets, short(host.name))
    return (names[0], sets[names[0]]) if names else None


def routed_by(host) -> dict[str, ReplicaSet]:
    """The sets whose router runs on `host`."""
    sets = replica_sets()
    return {name: sets[name] for name in sets_of(sets, short(host.name))[1]}


def address(inventory_host) -> str:
    """Where other hosts reach `inventory_host`: its container's static address, else its SSH name."""
    data = inventory_host.data.dict()
    try:
        spec = load_container(inventory_host.name, data)
    except ConfigError:
        spec = None
    if spec is not None and spec.net0.ip not in ("dhcp", "manual"):
        return spec.net0.ip.split("/")[0]
    return str(data.get("ssh_hostname") or inventory_host.name)


def url_of(at: str, port: int) -> str:
    """http://ADDR:PORT, an IPv6 address in brackets."""
    return f"http://[{at}]:{port}" if ":" in at else f"http://{at}:{port}"


def worker_url(inventory_host) -> str:
    """The replica's active server as the router reaches it."""
    config = load_deployment(inventory_host.name, inventory_host.data.dict(), _project())
    active = config.servers[config.data.active_server or ""]
    return url_of(address(inventory_host), active.args.port or paths.SGLANG_DEFAULT_PORT)


def router_url(replica_set: ReplicaSet) -> str:
    return url_of(address(named_host(replica_set.router.host)), replica_set.router.port)
