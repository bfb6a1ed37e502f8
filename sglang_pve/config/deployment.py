"""The whole deployment of one host, built from pyinfra host data and validated once."""

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.nccl import check_profile
from sglang_pve.config.problems import problems_from
from sglang_pve.config.safe import HostPath, Name, Text
from sglang_pve.config.secrets import SecretsData, ServerSecrets, read_secrets
from sglang_pve.config.servers import ServerConfig, build_servers, env_name_problem, read_servers_file

_LIMIT = r"^(infinity|[0-9]+[KMGT]?)$"
_VERSION = r"^[A-Za-z0-9.+!_-]{1,128}$"  # PEP 440's alphabet: a version is part of the venv path
_USER = r"^[a-z_][a-z0-9_-]{0,31}$"
_URL = r"^https?://[A-Za-z0-9._~:/?#@!$&()*+,;=%-]{1,2048}$"  # RFC 3986 characters, ASCII only
NIGHTLY = re.compile(r"nightly(-[0-9]{8})?")  # sglang_version: the newest nightly, or that day's
_MODULE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class UnitLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    nofile: int | Literal["infinity"] = 1048576
    memlock: int | str = Field("infinity", pattern=_LIMIT)


class HostData(BaseModel):
    """The host-data keys the deploy reads (group_data/all.py documents each)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    nccl_profiles: dict[Name, dict[Any, Any]]  # each profile's keys and values checked by check_profile
    nccl_profile: Name
    servers_file: Text
    active_server: Text | None
    sglang_version: str = Field(pattern=_VERSION)
    sglang_index_url: str = Field(pattern=_URL)
    sglang_extra_index_urls: list[Annotated[str, Field(pattern=_URL)]] = []
    sglang_venvs_dir: HostPath
    sglang_installer: Literal["uv", "pip"] = "uv"
    uv_version: str = Field("0.13.9", pattern=_VERSION)
    sglang_import_check: list[Annotated[str, Field(pattern=_MODULE)]] = Field(
        ["sglang", "torch", "sgl_kernel"], min_length=1
    )
    releases_kept: int = Field(5, ge=2, le=100)
    unit_limits: UnitLimits = UnitLimits()
    shell_user: str = Field(pattern=_USER)
    shell_rc: HostPath
    lifecycle: dict[Any, Any] = {}  # merged under each server's lifecycle: and validated there
    # Secrets (named by source, never by value) and who the server runs as (group_data/all.py)
    sglang_secrets: SecretsData = SecretsData()
    allow_unauthenticated: bool = False
    server_user: str = Field("sglang", pattern=_USER)
    server_groups: list[Annotated[str, Field(pattern=_USER)]] = []
    server_runtime_dirs: list[Name] = []

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
) -> Deployment:
    """Validate everything the deploy needs from `data` (host.data as a dict); raise ConfigError
    listing every problem, before any remote command runs. `resolve(host_data)` gives the exact
    SGLang version (context._resolve: sglang_pve.deploy.index for nightly specs; it may raise ConfigError)."""
    try:
        host_data = HostData.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc, HostData)
        for problem in problems:  # --data turns 0.5 into a float: say how to keep it a string
            if problem.key == "sglang_version" and not isinstance(problem.value, str):
                problems[problems.index(problem)] = Problem(problem.key, problem.value, problem.message, _VERSION_HINT)
        raise ConfigError(host_name, problems) from None

    problems = []
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
    secrets, found = read_secrets(host_data.sglang_secrets)
    problems += found + secret_env_problems(host_data.sglang_secrets)
    if problems:
        raise ConfigError(host_name, problems)

    profile = host_data.nccl_profiles[host_data.nccl_profile]
    return Deployment(
        data=host_data,
        sglang_version=resolve(host_data),
        nccl_env={k: str(v) for k, v in profile.items()},
        servers=servers,
        secrets=secrets,
    )
