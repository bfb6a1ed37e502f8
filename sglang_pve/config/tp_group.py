"""TP groups: one server configuration spread over containers on several nodes (SGLang's
--nnodes / --node-rank / --dist-init-addr), named in data and validated before any change.

Host data key `tp_groups` (the same on every member, e.g. in group_data/all.py or the inventory):

    tp_groups = {
        "kimi": {
            "server": "kimi-tp16",              # the configuration every member runs (servers.yml)
            "members": ["sglang4", "sglang5"],  # inventory hosts in rank order: the first is rank 0
            "dist_init_port": 20000,            # rank 0's TCPStore port (SGLang's multi_node.mdx example)
        }
    }

Ranks come from the inventory: a member's node rank is its place in `members`, its GPU count
that of its container's `gpus` list, rank 0's address (`--dist-init-addr HOST:PORT`) its
container's net0 address. The members' SGLang flags nnodes, node-rank and dist-init-addr are
rendered from here (deploy/render.py), never written in servers.yml. Checked across members:
every member exists and is in one group only, the GPU counts add up to the configuration's
tp-size, the configuration, model, SGLang version and NCCL profile are the same everywhere;
there is one rank 0 by construction (the first member).
The checks a host can only answer itself (installed version, model config hash, the port
reachable from every rank) are preflight's.

    group = member_of("@pveguest/sglang5", all_host_data)  # TpRank(group="kimi", rank=1, nnodes=2, ...)
"""

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import ip_interface
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglang_pve.config.errors import Problem
from sglang_pve.config.nccl import DEFAULT_PROFILE, PROFILES
from sglang_pve.config.problems import problems_from
from sglang_pve.config.safe import Name
from sglang_pve.config.servers import deep_merge, read_servers_file

HostsData = Mapping[str, Mapping[str, object]]  # inventory host name: its host data


class TpGroupData(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    server: Name
    members: list[Name] = Field(min_length=2, max_length=64)
    dist_init_port: int = Field(20000, ge=1024, le=65535)


@dataclass(frozen=True)
class TpRank:
    """One member's place in its group: what its unit and agent spec are rendered with."""

    group: str
    server: str
    rank: int  # SGLang's --node-rank
    nnodes: int
    tp_size: int  # the sum of the members' GPUs
    dist_init_addr: str  # rank 0's HOST:PORT ([v6]:PORT)
    addresses: tuple[str, ...]  # every member's address, by rank (the agents' peer watch)
    dist_init_port: int

    @property
    def flags(self) -> dict[str, object]:
        """SGLang's multi-node flags of this member."""
        return {"nnodes": self.nnodes, "node-rank": self.rank, "dist-init-addr": self.dist_init_addr}


def short_name(host: str) -> str:
    """`@pveguest/sglang4` -> `sglang4`: members are named like the container hosts they are."""
    return host.rsplit("/", 1)[-1]


def _groups(data: Mapping[str, object]) -> tuple[dict[str, TpGroupData], list[Problem]]:
    raw = data.get("tp_groups") or {}
    if not isinstance(raw, dict):
        return {}, [
            Problem("tp_groups", raw, "expected a mapping of group name -> group", "write tp_groups: {name: {...}}")
        ]
    groups, problems = {}, []
    for name, value in raw.items():
        try:
            groups[str(name)] = TpGroupData.model_validate(value)
        except ValidationError as exc:
            problems += problems_from(exc, TpGroupData, f"tp_groups.{name}.")
    return groups, problems


def _container(data: Mapping[str, object]) -> Mapping[str, object]:
    container = data.get("container")
    return container if isinstance(container, dict) else {}


def _gpu_count(member: str, data: Mapping[str, object], key: str) -> tuple[int, list[Problem]]:
    gpus = _container(data).get("gpus", "all")
    if isinstance(gpus, list) and gpus:
        return len(gpus), []
    return 0, [
        Problem(
            key,
            gpus,
            f"member {member} needs a list of its GPUs: its GPU count is its share of tp-size",
            "give its container gpus: [0, 1, ...]",
        )
    ]


def _address(member: str, data: Mapping[str, object], key: str) -> tuple[str, list[Problem]]:
    net0 = _container(data).get("net0")
    ip = net0.get("ip") if isinstance(net0, dict) else None
    try:
        address = str(ip_interface(str(ip)).ip)
    except ValueError:
        return "", [
            Problem(
                key,
                ip,
                f"member {member} needs a static address: the other ranks reach rank 0 on it (--dist-init-addr)",
                "give its container net0.ip as ADDRESS/PREFIX",
            )
        ]
    return address, []


def _server_flags(data: Mapping[str, object], server: str, project_dir: Path) -> dict[object, object] | None:
    """The merged raw flags of `server` in a member's servers file (validated by the member's own load)."""
    servers_file = data.get("servers_file")
    if not isinstance(servers_file, str):
        return None
    document, problems = read_servers_file(project_dir / servers_file)
    if problems or server not in document["servers"] or not isinstance(document["servers"][server], dict | None):
        return None
    defaults = document.get("defaults")
    return deep_merge(defaults if isinstance(defaults, dict) else {}, document["servers"][server] or {})


def _profile(data: Mapping[str, object]) -> object:
    """The active NCCL profile's variables (the default profiles where the data names none)."""
    profiles = data.get("nccl_profiles") or PROFILES
    return profiles.get(data.get("nccl_profile") or DEFAULT_PROFILE) if isinstance(profiles, dict) else None


# Host-data keys that must be the same on every member: a different build or NCCL profile on one
# rank breaks the collectives (or silently slows every rank to the slowest).
_SAME = ("sglang_version", "nccl_profile")


def _agreement(
    group: str,
    spec: TpGroupData,
    members: dict[str, Mapping[str, object]],
    project_dir: Path,
    defaults: Mapping[str, object],
) -> list[Problem]:
    problems = []
    first, *others = spec.members
    for key in _SAME:
        values = {member: members[member].get(key, defaults.get(key)) for member in spec.members}
        for member in others:
            if values[member] != values[first]:
                problems.append(
                    Problem(
                        f"tp_groups.{group}.members.{member}.{key}",
                        values[member],
                        f"differs from rank 0's ({values[first]!r}): every rank of a TP group runs the same",
                        f"set the same {key} on every member of {group}",
                    )
                )
    for member in others:
        if _profile(members[member]) != _profile(members[first]):
            problems.append(
                Problem(
                    f"tp_groups.{group}.members.{member}.nccl_profiles",
                    members[member].get("nccl_profile"),
                    "the active NCCL profile's variables differ from rank 0's",
                    f"give every member of {group} the same nccl_profiles",
                )
            )
    flags = {m: _server_flags(members[m], spec.server, project_dir) for m in spec.members}
    for member, found in flags.items():
        if found is None:
            problems.append(
                Problem(
                    f"tp_groups.{group}.server",
                    spec.server,
                    f"no such configuration in member {member}'s servers_file",
                    f"add {spec.server} to its servers file, or name one it has",
                )
            )
        elif members[member].get("active_server") != spec.server:
            problems.append(
                Problem(
                    f"tp_groups.{group}.members.{member}.active_server",
                    members[member].get("active_server"),
                    f"a member runs its group's configuration {spec.server}",
                    f"set active_server: {spec.server} on {member}",
                )
            )
    host = (flags[first] or {}).get("host")
    if flags[first] is not None and str(host) in ("None", "127.0.0.1", "::1", "localhost"):
        problems.append(
            Problem(
                f"tp_groups.{group}.server",
                spec.server,
                f"{spec.server} binds {host or '127.0.0.1 (the default)'}: the ranks above 0 are ready only "
                "when rank 0's /health answers at rank 0's address",
                f"set host: 0.0.0.0 (or the members' address) in {spec.server}",
            )
        )
    if all(found is not None for found in flags.values()):
        for member in others:
            for flag in ("model-path", "tp-size"):
                mine, theirs = flags[member].get(flag), flags[first].get(flag)  # type: ignore[union-attr]
                if mine != theirs:
                    problems.append(
                        Problem(
                            f"tp_groups.{group}.members.{member}.{flag}",
                            mine,
                            f"differs from rank 0's ({theirs!r}): every rank serves the same model",
                            f"give {spec.server} the same {flag} on every member",
                        )
                    )
    return problems


def member_of(
    host: str, hosts: HostsData, project_dir: Path, defaults: Mapping[str, object]
) -> tuple[TpRank | None, list[Problem]]:
    """`host`'s rank in its TP group (None: in none), with every problem of that group at once.

    The groups are read from `host`'s own data; the members' data from `hosts` (every inventory
    host, by name); `defaults` are the host-data defaults of the keys every member must agree on."""
    groups, problems = _groups(hosts.get(host) or {})
    by_name = {short_name(name): data for name, data in hosts.items()}
    mine = short_name(host)
    found: TpRank | None = None
    seen: dict[str, str] = {}
    for group, spec in groups.items():
        key = f"tp_groups.{group}.members"
        for member in spec.members:
            if member in seen:
                problems.append(
                    Problem(
                        key,
                        member,
                        f"{member} is a member of {seen[member]} already: a container serves one group",
                        "name each container in one group only, once",
                    )
                )
            seen.setdefault(member, group)
        missing = [m for m in spec.members if m not in by_name]
        if missing:
            problems += [
                Problem(key, m, "no such host in the inventory", "name the members' inventory hosts (e.g. sglang4)")
                for m in missing
            ]
            continue
        members = {m: by_name[m] for m in spec.members}
        counts, addresses = [], []
        for member in spec.members:
            count, found_problems = _gpu_count(member, members[member], f"{key}.{member}.container.gpus")
            address, address_problems = _address(member, members[member], f"{key}.{member}.container.net0.ip")
            counts.append(count)
            addresses.append(address)
            problems += found_problems + address_problems
        problems += _agreement(group, spec, members, project_dir, defaults)
        tp_size = (_server_flags(members[spec.members[0]], spec.server, project_dir) or {}).get("tp-size")
        if all(counts) and len(set(counts)) > 1:
            problems.append(
                Problem(
                    f"tp_groups.{group}",
                    f"{' + '.join(map(str, counts))} GPUs",
                    "SGLang gives every node tp-size / nnodes ranks (engine.py _calculate_rank_ranges): "
                    "the members need the same number of GPUs",
                    "give every member's container as many GPUs as the others",
                )
            )
        elif isinstance(tp_size, int) and all(counts) and sum(counts) != tp_size:
            problems.append(
                Problem(
                    f"tp_groups.{group}",
                    f"{' + '.join(map(str, counts))} GPUs",
                    f"the members' GPUs add up to {sum(counts)}, {spec.server}'s tp-size is {tp_size}",
                    f"set tp-size: {sum(counts)} in {spec.server}, or change the members' gpus",
                )
            )
        if mine in spec.members and not problems:
            rank0 = addresses[0]
            host0 = f"[{rank0}]" if ":" in rank0 else rank0
            found = TpRank(
                group=group,
                server=spec.server,
                rank=spec.members.index(mine),
                nnodes=len(spec.members),
                tp_size=sum(counts),
                dist_init_addr=f"{host0}:{spec.dist_init_port}",
                addresses=tuple(addresses),
                dist_init_port=spec.dist_init_port,
            )
    return (None, problems) if problems else (found, [])
