"""Replica sets: several containers serving the same configuration behind SGLang's router.

Named in host data, the same on every host (group_data/all.py or an inventory group):

    replica_sets = {
        "kimi": {
            "members": ["sglang1", "sglang2", "sglang3"],      # inventory hosts (containers)
            "router": {"host": "router1", "port": 30000, "policy": "cache_aware",
                       "options": {"health-check-interval-secs": 10}},
            "max_unavailable": 1,                              # replicas out of the router at once
            "drain_timeout_s": 60,                             # in-flight requests finish within this
        }
    }

The router is sglang-router (sgl-project/sglang sgl-model-gateway, the PyPI package), pinned in
router-requirement.txt beside this file (the one source: the lab's index serves the same pin).
Its flags are launch_router's (sglang_router/router_args.py RouterArgs.add_cli_args, 0.3.2, as
`python -m sglang_router.launch_router --help` prints them): the toolkit sets the ones that name
workers, addresses and the key; `options` may set the tuning flags in OPTIONS, no other.

replica_set_problems() checks a set against the inventory before any change: every member and
the router host exist, are containers and are not in two roles; every member runs a server
configuration, all of them the same model and the same SGLang version (a member's server unit
lets its set's router in by itself: deploy/context.py unit_host peers).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sglang_pve.config.errors import Problem
from sglang_pve.config.safe import Name

_PIN_FILE = Path(__file__).with_name("router-requirement.txt")
_PIN = re.compile(r"sglang-router==(?P<version>[0-9][A-Za-z0-9.+!_-]*)")


def read_router_pin(text: str) -> str:
    """The pinned sglang-router version from router-requirement.txt (comments aside).

    >>> read_router_pin("# c\\nsglang-router==0.3.2\\n")
    '0.3.2'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    found = _PIN.fullmatch(lines[0]) if len(lines) == 1 else None
    if not found:
        raise ValueError(f"{_PIN_FILE}: expected one line `sglang-router==VERSION`")
    return found["version"]


ROUTER_VERSION = read_router_pin(_PIN_FILE.read_text())
ROUTER_DISTRIBUTION = "sglang-router"
# launch_router's --policy choices (0.3.2; "bucket" is a prefill policy of PD mode only).
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
# The tuning flags `options` may set, with their types (launch_router --help, 0.3.2). Not here:
# what the toolkit sets (--host, --port, --worker-urls, --policy, --api-key, --prometheus-*),
# secrets (--control-plane-api-keys, --oracle-password, --postgres-db-url, --redis-url) and the
# modes the toolkit does not deploy (PD disaggregation, service discovery, IGW, mini LB).
OPTIONS: dict[str, type] = {
    "cache-threshold": float,
    "balance-abs-threshold": int,
    "balance-rel-threshold": float,
    "eviction-interval-secs": int,
    "max-tree-size": int,
    "max-payload-size": int,
    "worker-startup-timeout-secs": int,
    "worker-startup-check-interval": int,
    "log-level": str,
    "request-timeout-secs": int,
    "shutdown-grace-period-secs": int,
    "max-concurrent-requests": int,
    "queue-size": int,
    "queue-timeout-secs": int,
    "retry-max-retries": int,
    "retry-initial-backoff-ms": int,
    "retry-max-backoff-ms": int,
    "retry-backoff-multiplier": float,
    "retry-jitter-factor": float,
    "disable-retries": bool,
    "cb-failure-threshold": int,
    "cb-success-threshold": int,
    "cb-timeout-duration-secs": int,
    "cb-window-duration-secs": int,
    "disable-circuit-breaker": bool,
    "health-failure-threshold": int,
    "health-success-threshold": int,
    "health-check-timeout-secs": int,
    "health-check-interval-secs": int,
    "health-check-endpoint": str,
}
_LOG_LEVELS = ("debug", "info", "warn", "error")
_ENDPOINT = re.compile(r"/[A-Za-z0-9_./-]{0,127}")


class RouterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    host: Name  # the inventory host (a container) whose unit runs the router
    port: int = Field(30000, ge=1, le=65535)  # launch_router's default
    bind: str = Field("0.0.0.0", pattern=r"^[0-9a-fA-F.:]{2,45}$")  # an address, never a name
    policy: str = "cache_aware"  # launch_router's default
    prometheus_port: int = Field(29000, ge=1, le=65535)  # its own metrics (launch_router's default)
    options: dict[str, bool | int | float | str] = {}

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"not a policy of sglang-router {ROUTER_VERSION}; use one of {', '.join(POLICIES)}")
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, bool | int | float | str]) -> dict[str, bool | int | float | str]:
        for flag, setting in value.items():
            kind = OPTIONS.get(flag)
            if kind is None:
                raise ValueError(
                    f"{flag}: not a router option the toolkit passes (the toolkit sets addresses, workers, "
                    f"policy, the key and metrics itself); use one of {', '.join(OPTIONS)}"
                )
            numeric = kind is float and isinstance(setting, int) and not isinstance(setting, bool)
            if not (isinstance(setting, kind) or numeric) or (kind is not bool and isinstance(setting, bool)):
                raise ValueError(f"{flag}: {setting!r} is not a {kind.__name__}")
            if kind is bool and setting is not True:
                raise ValueError(f"{flag}: a switch is set with true, or left out")
            if flag == "log-level" and setting not in _LOG_LEVELS:
                raise ValueError(f"log-level: use one of {', '.join(_LOG_LEVELS)}")
            if flag == "health-check-endpoint" and not _ENDPOINT.fullmatch(str(setting)):
                raise ValueError("health-check-endpoint: a path such as /health")
            if kind in (int, float) and setting < 0 and flag != "max-concurrent-requests":  # type: ignore[operator]
                raise ValueError(f"{flag}: must not be negative")
        return value

    def flags(self) -> list[str]:
        """The options as launch_router arguments, in a stable order."""
        words = []
        for flag, setting in sorted(self.options.items()):
            words += [f"--{flag}"] if setting is True else [f"--{flag}", str(setting)]
        return words


class ReplicaSet(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    members: list[Name] = Field(min_length=1)
    router: RouterSpec
    max_unavailable: int = Field(1, ge=1)
    drain_timeout_s: float = Field(60, gt=0, le=86400)

    @field_validator("members")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} named more than once")
        return value


@dataclass(frozen=True)
class Member:
    """What a replica set asks of an inventory host (deploy/replicas.py builds it from host data)."""

    container: bool  # a provisioned container (host data container:)
    sglang_version: str | None  # exact, as resolved; None where its data does not validate
    model: str | None  # the active configuration's model-path; None: no server runs


def replica_set_problems(name: str, replica_set: ReplicaSet, hosts: Mapping[str, Member]) -> list[Problem]:
    """Every problem of replica set `name` against the inventory's hosts, at once."""
    key = f"replica_sets.{name}"
    problems = []
    for member in replica_set.members:
        found = hosts.get(member)
        if found is None or not found.container:
            what = "no host of the inventory" if found is None else "not a container (no container: data)"
            problems.append(Problem(f"{key}.members", member, what, "name containers of this inventory"))
        elif found.model is None:
            problems.append(
                Problem(f"{key}.members", member, "runs no server (active_server is null)", "set its active_server")
            )
    router = hosts.get(replica_set.router.host)
    if router is None or not router.container:
        what = "no host of the inventory" if router is None else "not a container (no container: data)"
        problems.append(Problem(f"{key}.router.host", replica_set.router.host, what, "name a container"))
    if replica_set.router.host in replica_set.members:
        problems.append(
            Problem(
                f"{key}.router.host",
                replica_set.router.host,
                "is also a member: its switch would take the router down with the replica",
                "run the router on a container that is not a member",
            )
        )
    serving = {m: hosts[m] for m in replica_set.members if m in hosts and hosts[m].container and hosts[m].model}
    for what, field in (("model", "model"), ("SGLang version", "sglang_version")):
        values = {getattr(member, field) for member in serving.values()}
        if len(values) > 1:
            each = ", ".join(f"{m}: {getattr(member, field)}" for m, member in sorted(serving.items()))
            problems.append(
                Problem(
                    f"{key}.members",
                    ", ".join(sorted(serving)),
                    f"serve different {what}s ({each})",
                    f"give every member the same {what}: the router sends any request to any of them",
                )
            )
    if replica_set.max_unavailable >= len(replica_set.members) > 0:
        problems.append(
            Problem(
                f"{key}.max_unavailable",
                replica_set.max_unavailable,
                f"takes every one of the {len(replica_set.members)} members out of the router at once",
                f"use at most {len(replica_set.members) - 1}",
            )
        )
    return problems


def sets_of(replica_sets: Mapping[str, ReplicaSet], host_name: str) -> tuple[list[str], list[str]]:
    """(sets `host_name` is a member of, sets whose router it runs)."""
    member = [name for name, rs in sorted(replica_sets.items()) if host_name in rs.members]
    routes = [name for name, rs in sorted(replica_sets.items()) if rs.router.host == host_name]
    return member, routes
