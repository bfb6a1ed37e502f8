"""The whole deployment of one host, built from pyinfra host data and validated once."""

import ipaddress
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.indexes import Hostname, IndexCredential, IndexLogin, index_problems, read_index_logins
from sglang_pve.config.nccl import DEFAULT_PROFILE, PROFILES, check_profile
from sglang_pve.config.problems import problems_from
from sglang_pve.config.replica_set import ROUTER_VERSION, ReplicaSet
from sglang_pve.config.safe import HostPath, Name, Text
from sglang_pve.config.secrets import SecretsData, ServerSecrets, read_secrets
from sglang_pve.config.servers import ServerConfig, build_servers, env_name_problem, read_servers_file
from sglang_pve.config.ssh import SshAccess, connector_secret_problems
from sglang_pve.config.supply import SHA256, UV_PIN, PackageName, supply_problems
from sglang_pve.config.tp_group import HostsData, TpRank, member_of

_LIMIT = r"^(infinity|[0-9]+[KMGT]?)$"
_VERSION = r"^[A-Za-z0-9.+!_-]{1,128}$"  # PEP 440's alphabet: a version is part of the venv path
_USER = r"^[a-z_][a-z0-9_-]{0,31}$"
_URL = r"^https?://[A-Za-z0-9._~:/?#@!$&()*+,;=%-]{1,2048}$"  # RFC 3986 characters, ASCII only
NIGHTLY = re.compile(r"nightly(-[0-9]{8})?")  # sglang_version: the newest nightly, or that day's
_MODULE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
# Supplementary groups the server may not get: each is root, or root's reach, by another door.
# video and render stay allowed: they own /dev/dri/* and, where NVreg_DeviceFileMode is not 0666
# (the driver's default, NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-reg.h
# NV_REG_DEVICE_FILE_MODE, commit df1c9a3d), /dev/nvidia*; devN passthrough makes them mode=0666
# in the container (provision/desired.py), so the lab and the default need no group.
PRIVILEGED_GROUPS = {
    "root": "gid 0 owns most of the system's files",
    "wheel": "sudo or su to root",
    "sudo": "sudo to root",
    "admin": "sudo to root (Ubuntu before 12.04)",
    "adm": "reads every log under /var/log, secrets in them included",
    "systemd-journal": "reads every unit's journal",
    "shadow": "reads /etc/shadow",
    "disk": "raw read and write of every block device",
    "kmem": "reads kernel memory (/dev/mem, /dev/kmem, /dev/port)",
    "tty": "writes to other users' terminals",
    "input": "reads every keyboard and mouse",
    "staff": "writes /usr/local (Debian), which root's PATH runs first",
    "docker": "its socket starts root containers",
    "lxd": "its socket starts privileged containers",
    "incus-admin": "its socket starts privileged containers",
    "libvirt": "its socket starts virtual machines with host devices",
}
SGLANG_VERSION = "0.5.16.dev20260720+g8905cbd42"  # the SGLang build this toolkit release is tested with


class UnitLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    nofile: int | Literal["infinity"] = 1048576
    memlock: int | str = Field("infinity", pattern=_LIMIT)


class HostData(SshAccess):
    """The host-data keys the deploy reads, with the toolkit's defaults: a repository that only
    names its servers (servers_file, active_server) gets a working deploy. Override any key per
    group (group_data/<group>.py), per host (inventory) or per run (--data key=value); the ssh_*
    keys pyinfra reads are checked too (config/ssh.py)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    # NCCL tuning profiles (config/nccl.py PROFILES; each profile's keys and values checked by
    # check_profile) and the one active everywhere
    nccl_profiles: dict[Name, dict[Any, Any]] = PROFILES
    nccl_profile: Name = DEFAULT_PROFILE
    # Server configurations (SGLang flag names; relative to the project directory) and which one
    # runs (None: none): only the site knows them, so they have no default.
    servers_file: Text
    active_server: Text | None
    # The SGLang build: an exact version, or "nightly" / "nightly-YYYYMMDD", resolved once per run
    # on the controller against the indexes below to the exact nightly (its version names the
    # commit). The default is the build this release of the toolkit is tested with; SGLang's kernel
    # wheels for CUDA 13 come from its extra index. One virtualenv per version under
    # sglang_venvs_dir, built beside its final path and moved into place only after the install
    # from a hash-locked resolution and the import check passed.
    sglang_version: str = Field(SGLANG_VERSION, pattern=_VERSION)
    sglang_index_url: str = Field("https://pypi.org/simple", pattern=_URL)
    sglang_extra_index_urls: list[Annotated[str, Field(pattern=_URL)]] = ["https://docs.sglang.ai/whl/cu130/"]
    # The indexes' logins, by host, the password from a secret source (config/indexes.py), never
    # in a URL: {"pypi.example": {"login": "__token__", "password": {"env": "PYPI_TOKEN"}}}.
    # http:// only to the hosts named here (a mirror on a trusted network; the lab's index).
    sglang_index_credentials: dict[Hostname, IndexCredential] = {}
    sglang_index_http_hosts: list[Hostname] = []
    sglang_venvs_dir: HostPath = "/opt/sglang/venvs"
    # Where each distribution comes from (config/supply.py): the packages named here only from the
    # extra index (uv: an explicit index, [tool.uv.sources]; each becomes a requirement of the
    # venv), every other one only from sglang_index_url: never the best match across both. A PyPI
    # release of SGLang (not a nightly) comes from PyPI: leave "sglang" out then.
    sglang_index_packages: list[PackageName] = ["sglang", "sgl-kernel"]
    # Wheels only: nothing is built (as root) while resolving or installing, except these
    # distributions, which are then built from their sdist (--no-binary).
    sglang_sdist_allowed: list[PackageName] = []
    # Installs from the lock: "uv" (installed on the host from sglang_index_url, at uv_version,
    # with hashes required: uv_sha256, one per wheel of the hosts' platforms) or "pip" (one index only).
    sglang_installer: Literal["uv", "pip"] = "uv"
    uv_version: str = Field(UV_PIN.version, pattern=_VERSION)
    uv_sha256: list[Annotated[str, Field(pattern=SHA256)]] = Field(list(UV_PIN.sha256), min_length=1)
    # Imported by the new venv's python before it is moved into place: SGLang, torch, the kernel.
    sglang_import_check: list[Annotated[str, Field(pattern=_MODULE)]] = Field(
        ["sglang", "torch", "sgl_kernel"], min_length=1
    )
    # Releases (/var/lib/sglang-pve/releases): how many are kept, with their venvs, for rollback.
    releases_kept: int = Field(5, ge=2, le=100)
    # One run at a time changes a container (files, venvs, releases, switches, benchmarks): a run
    # that finds another one holding the container's deploy lock waits this many seconds for it,
    # naming it (0: refuse at once).
    wait_lock: int = Field(3600, ge=0, le=86400)
    # Where tasks/scrape_targets.py writes <host>.json on the controller: the directory your
    # Prometheus' file_sd_configs reads (None: file_sd/ under the project directory).
    scrape_targets_dir: HostPath | None = None
    # Resource limits of every server unit (SGLang raises NOFILE itself, but only up to the hard limit).
    unit_limits: UnitLimits = UnitLimits()
    # The interactive user whose shell rc gets the managed NCCL block.
    shell_user: str = Field("root", pattern=_USER)
    shell_rc: HostPath = "/root/.zshrc"
    # Every server configuration's lifecycle: block starts from this (deadlines, watchdog; the
    # agent's own defaults below it: sglang_pve/agent/spec.py), its own lifecycle: over it,
    # validated there.
    lifecycle: dict[Any, Any] = {}
    # Secrets, named by where the controller reads them, never by value: {"env": "VARIABLE"} or
    # {"file": "/path/to/0600-file"}. Written on the host only into root-only files (SGLang's config
    # copy it loads with LoadCredential=, an EnvironmentFile), never into units, diffs or command lines.
    #   sglang_secrets = {"api-key": {"file": "~/.config/sglang-pve/api-key"},
    #                     "admin-api-key": {"env": "SGLANG_ADMIN_API_KEY"},
    #                     "env": {"HF_TOKEN": {"env": "HF_TOKEN"}}}
    sglang_secrets: SecretsData = SecretsData()
    # A server bound beyond the loopback without an api-key is refused by preflight; true accepts
    # that, with a warning.
    allow_unauthenticated: bool = False
    # The servers run as this dedicated user (systemd DynamicUser unless a static user of that name
    # exists), sandboxed; "root" runs them unsandboxed, with a warning. server_groups: supplementary
    # groups, e.g. ["video"] where /dev/nvidia* are not world-accessible (NVreg_DeviceFileMode);
    # groups that give root or another user's data are refused (PRIVILEGED_GROUPS).
    server_user: str = Field("sglang", pattern=_USER)
    server_groups: list[Annotated[str, Field(pattern=_USER)]] = []
    # Runtime directories (/run/NAME) each server unit may write, as its own.
    server_runtime_dirs: list[Name] = []
    # TP groups: one configuration over containers on several nodes (config/tp_group.py, checked
    # across the members when the deploy has the whole inventory).
    tp_groups: dict[Name, dict[Any, Any]] = {}
    # The networks the servers' and routers' clients are in (the users' LAN), e.g. ["192.168.10.0/24"]:
    # the units deny every other IP address (IPAddressDeny=any) but the loopback, the host's own
    # addresses, a TP group's members, a replica's router and a router's workers
    # (sglang_pve/deploy/sandbox.py ip_allow). Empty: only this host's own clients; a
    # network that holds the Proxmox node gives the server its API and SSH too, so name hosts or
    # the clients' own subnet.
    server_clients: list[str] = []
    # Replica sets: containers serving the same configuration behind SGLang's router (sglang-router,
    # at router_version, in its own venv under sglang_venvs_dir, from sglang_index_url), the same on
    # every host; config/replica_set.py documents the keys and checks them across the inventory.
    replica_sets: dict[Name, ReplicaSet] = {}
    router_version: str = Field(ROUTER_VERSION, pattern=_VERSION)

    @field_validator("server_groups")
    @classmethod
    def _unprivileged(cls, value: list[str]) -> list[str]:
        refused = [group for group in value if group in PRIVILEGED_GROUPS]
        if refused:
            raise ValueError(
                f"{refused[0]} is a privileged group ({PRIVILEGED_GROUPS[refused[0]]}): the sandboxed server "
                f"would get it back; remove it from server_groups (the GPU needs at most video or render)"
            )
        return value

    @field_validator("server_clients")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        """Normalised (10.0.0.0/24, fd00::/64); host bits set are refused: a typo, not a network."""
        out = []
        for item in value:
            try:
                out.append(str(ipaddress.ip_network(item, strict=True)))
            except ValueError:
                raise ValueError(
                    "not an IP address or network (10.0.0.7, 10.0.0.0/24, fd00::/64; no host bits set)"
                ) from None
        return out

    @field_validator("sglang_version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        if NIGHTLY.fullmatch(value):
            return value
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError("not a PEP 440 version, nor nightly or nightly-YYYYMMDD") from None
        return value


class Deployment(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)
    data: HostData
    sglang_version: str  # exact: data.sglang_version, or the nightly it resolved to (sglang_pve.deploy.index)
    nccl_env: dict[str, str]  # the active profile, values as strings
    servers: dict[str, ServerConfig]
    secrets: ServerSecrets = ServerSecrets()
    index_logins: tuple[IndexLogin, ...] = ()  # sglang_index_credentials, their passwords read
    tp: TpRank | None = None  # this host's rank in its TP group, None in none


_VERSION_HINT = "quote it so it stays a string, e.g. --data 'sglang_version=\"0.5.10\"'"


def secret_env_problems(data: SecretsData) -> list[Problem]:
    """Secret environment obeys the rules of env: (no loader, NCCL or toolkit variables)."""
    found = [env_name_problem(f"sglang_secrets.env.{name}", name, []) for name in data.env]
    return [problem for problem in found if problem]


def load_deployment(
    host_name: str,
    data: Mapping[str, object],
    project_dir: Path,
    resolve: Callable[[HostData], str] = lambda d: d.sglang_version,
    hosts: HostsData | None = None,
) -> Deployment:
    """Validate everything the deploy needs from `data` (host.data as a dict); raise ConfigError
    listing every problem, before any remote command runs. `resolve(host_data)` gives the exact
    SGLang version (context._resolve: sglang_pve.deploy.index for nightly specs; it may raise ConfigError).
    `hosts` (every inventory host's data, by name) places the host in its TP group, if any."""
    secrets_in_data = connector_secret_problems(data)
    try:
        host_data = HostData.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc, HostData)
        for problem in problems:  # --data turns 0.5 into a float: say how to keep it a string
            if problem.key == "sglang_version" and not isinstance(problem.value, str):
                problems[problems.index(problem)] = Problem(problem.key, problem.value, problem.message, _VERSION_HINT)
        raise ConfigError(host_name, secrets_in_data + problems) from None

    problems = list(secrets_in_data)
    for name, variables in host_data.nccl_profiles.items():
        problems += check_profile(name, variables)
    if host_data.nccl_profile not in host_data.nccl_profiles:
        problems.append(
            Problem(
                "nccl_profile",
                host_data.nccl_profile,
                "no such profile",
                f"use one of {', '.join(host_data.nccl_profiles)}",
            )
        )

    document, found = read_servers_file(project_dir / host_data.servers_file)
    problems += found
    servers, found = build_servers(document, host_data.lifecycle) if document else ({}, [])
    problems += found
    if document and host_data.active_server is not None and host_data.active_server not in document["servers"]:
        problems.append(
            Problem(
                "active_server",
                host_data.active_server,
                "no such server configuration",
                f"use one of {', '.join(map(str, document['servers']))}, or null to run none",
            )
        )
    problems += supply_problems(host_data) + index_problems(host_data)
    index_logins, found = read_index_logins(host_data)
    problems += found
    secrets, found = read_secrets(host_data.sglang_secrets)
    problems += found + secret_env_problems(host_data.sglang_secrets)
    if hosts is not None:
        defaults = {key: HostData.model_fields[key].default for key in ("sglang_version", "nccl_profile")}
        tp, found = member_of(host_name, {**hosts, host_name: data}, project_dir, defaults)
        problems += found
    else:
        tp = None
    if problems:
        raise ConfigError(host_name, problems)

    profile = host_data.nccl_profiles[host_data.nccl_profile]
    return Deployment(
        data=host_data,
        sglang_version=resolve(host_data),
        nccl_env={k: str(v) for k, v in profile.items()},
        servers=servers,
        secrets=secrets,
        index_logins=index_logins,
        tp=tp,
    )
