"""Typed model of provisioning data: a Proxmox node's API settings and a container's spec.

Node hosts (inventory group ``pve_nodes``, reached over SSH as root) carry ``proxmox_api``;
container hosts carry ``container`` naming their node. Both are validated here, before any call:

    api = load_api_settings("pve1", pve1.data.dict())          # ApiSettings (credential read later)
    spec = load_container("sglang1", sglang1.data.dict())      # ContainerSpec, or None
"""

from collections.abc import Mapping
from ipaddress import ip_interface
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.problems import problems_from
from sglang_pve.config.safe import MountPath
from sglang_pve.config.ssh import SshAccess, connector_secret_problems

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # an inventory host / Proxmox node name
_STORAGE = r"^[a-z][a-z0-9._-]*$"  # pve-storage-id
_ABSOLUTE = r"^/[^\x00\n,=:]*$"  # no separator a property string or lxc line would read
_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"
_MAC = r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$"
_FINGERPRINT = r"^[0-9A-Fa-f]{2}(:?[0-9A-Fa-f]{2}){31}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ApiSettings(_Strict):
    """How the controller reaches a node's API (HTTPS, port 8006). Secrets are named, never given:
    ``password_env``/``password_file`` (root@pam ticket) or ``token_name`` + ``token_env``/``token_file``."""

    host: str = Field(pattern=r"^[A-Za-z0-9.:\[\]-]+$")
    port: int = Field(8006, ge=1, le=65535)
    node: str | None = Field(None, pattern=_NAME)  # the Proxmox node name; default: the inventory name
    user: str = Field("root@pam", pattern=r"^[A-Za-z0-9._-]+@[A-Za-z0-9._-]+$")
    password_env: str | None = Field(None, pattern=_ENV)
    password_file: str | None = Field(None, pattern=_ABSOLUTE)
    token_name: str | None = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9._-]*$")
    token_env: str | None = Field(None, pattern=_ENV)
    token_file: str | None = Field(None, pattern=_ABSOLUTE)
    ca_file: str | None = Field(None, pattern=_ABSOLUTE)
    fingerprint: str | None = Field(None, pattern=_FINGERPRINT)  # SHA-256 of the node's certificate
    verify: bool = True  # False only when said so explicitly (a warning is logged)
    timeout_s: int = Field(30, ge=1, le=600)  # one HTTP request
    task_timeout_s: int = Field(600, ge=1, le=86400)  # one Proxmox task (create, start, snapshot ...)

    @model_validator(mode="after")
    def _one_credential_and_one_trust(self) -> Self:
        secrets = [k for k in ("password_env", "password_file", "token_env", "token_file") if getattr(self, k)]
        if len(secrets) != 1:
            raise ValueError(
                "name exactly one secret source: password_env, password_file, token_env or token_file "
                f"(given: {', '.join(secrets) or 'none'})"
            )
        if (self.token_name is None) != (secrets[0].startswith("password")):
            raise ValueError(
                "token_env/token_file go with token_name (the API token's id, e.g. deploy for "
                "root@pam!deploy); password_env/password_file go without it"
            )
        trust = [k for k in ("ca_file", "fingerprint") if getattr(self, k)]
        if self.verify and len(trust) != 1:
            raise ValueError(
                "say how to trust the node's certificate: ca_file (the node's "
                "/etc/pve/pve-root-ca.pem, copied) or fingerprint (pvenode cert info: SHA-256); "
                f"or verify: false to skip verification (given: {', '.join(trust) or 'none'})"
            )
        if not self.verify and trust:
            raise ValueError(f"verify: false contradicts {trust[0]}: remove one of them")
        return self

    @property
    def uses_token(self) -> bool:
        return self.token_name is not None


class RootFs(_Strict):
    storage: str = Field(pattern=_STORAGE)
    size_gb: int = Field(ge=1)


class Net(_Strict):
    """net0: ``ip`` is ``dhcp`` or an address with prefix length (10.0.0.129/24)."""

    name: str = Field("eth0", pattern=r"^[a-z][a-z0-9]{0,14}$")
    bridge: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9._-]{0,14}$")
    ip: str
    gw: str | None = None
    hwaddr: str | None = Field(None, pattern=_MAC)
    firewall: bool | None = None

    @field_validator("ip")
    @classmethod
    def _cidr(cls, value: str) -> str:
        if value != "dhcp" and ("/" not in value or not _is_interface(value)):
            raise ValueError("not dhcp or an address with prefix length like 10.0.0.129/24")
        return value

    @field_validator("gw")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and ("/" in value or not _is_interface(value)):
            raise ValueError("not an IP address")
        return value


def _is_interface(value: str) -> bool:
    try:
        ip_interface(value)
    except ValueError:
        return False
    return True


class Startup(_Strict):
    order: int | None = Field(None, ge=0)
    up: int | None = Field(None, ge=0)
    down: int | None = Field(None, ge=0)


class Features(_Strict):
    nesting: bool | None = None
    keyctl: bool | None = None
    fuse: bool | None = None
    mknod: bool | None = None
    force_rw_sys: bool | None = None


class Mount(_Strict):
    """Model storage: a host directory bound into the container (read-only unless ``ro: false``).
    Both paths in safe.MountPath: provision/desired.py mount_line writes them into one
    ``lxc.mount.entry`` line that LXC reads with getmntent_r (lxc/lxc src/lxc/conf.c
    mount_file_entries, commit e7b855a5): fields split on blanks and tabs (a tab in a path shifts
    ``ro`` out of the options field: a writable rbind), ``#`` starts a comment and ``\\`` an octal
    escape; ``/`` itself or ``//`` would bind the node's whole root."""

    host: MountPath
    path: MountPath
    ro: bool = True


class ContainerSpec(_Strict):
    """The LXC container a host lives in (host data key ``container``; inventory/prod.py shows one)."""

    node: str = Field(pattern=_NAME)  # inventory name of its Proxmox node (group pve_nodes)
    vmid: int = Field(ge=100, le=999999999)
    hostname: str = Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
    template: str = Field(pattern=r"^[a-z][a-z0-9._-]*:vztmpl/[A-Za-z0-9._+-]+$")
    unprivileged: bool  # always explicit: PVE 9 creates unprivileged containers by default, PVE 8 privileged
    cores: int = Field(ge=1, le=8192)
    memory: int = Field(ge=16)  # MiB
    swap: int = Field(0, ge=0)  # MiB
    rootfs: RootFs
    net0: Net
    features: Features = Features()
    onboot: bool = True
    startup: Startup | None = None
    gpus: Literal["all"] | list[int] = "all"  # which of the node's GPUs (config/gpu_sets.py); []: none
    gpus_shared: bool = False  # its GPUs may also go to another container of the node that says so too
    passthrough: Literal["devN", "raw"] = "devN"  # raw: lxc.cgroup2 + lxc.mount.entry lines (PVE < 8.1)
    mounts: list[Mount] = []
    snapshots_keep: int = Field(5, ge=0, le=100)  # the toolkit's own snapshots kept; 0: take none

    @field_validator("gpus")
    @classmethod
    def _indices(cls, value: Literal["all"] | list[int]) -> Literal["all"] | list[int]:
        if isinstance(value, list) and (len(set(value)) != len(value) or any(i < 0 or i > 255 for i in value)):
            raise ValueError("GPU indices must be distinct, 0..255")
        return value

    @field_validator("mounts")
    @classmethod
    def _distinct_targets(cls, value: list[Mount]) -> list[Mount]:
        targets = [m.path for m in value]
        if len(set(targets)) != len(targets):
            raise ValueError(
                f"two mounts share a container path: {sorted(t for t in targets if targets.count(t) > 1)[0]}"
            )
        return value


class _NodeData(SshAccess):
    proxmox_api: ApiSettings


class _ContainerData(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    container: ContainerSpec | None = None


def load_api_settings(host_name: str, data: Mapping[str, object]) -> ApiSettings:
    """A node's API settings, validated (raises ConfigError listing every problem)."""
    secrets_in_data = connector_secret_problems(data)
    try:
        settings = _NodeData.model_validate(data).proxmox_api
    except ValidationError as exc:
        problems = [_without_secret(p) for p in problems_from(exc, _NodeData)]
        raise ConfigError(host_name, secrets_in_data + problems) from None
    if secrets_in_data:
        raise ConfigError(host_name, secrets_in_data)
    return settings


def _without_secret(problem: Problem) -> Problem:
    """A misplaced secret (``password: ...`` instead of ``password_env``) must not be echoed back;
    whole-section problems show the keys given, not their values."""
    known = {"proxmox_api." + name for name in ApiSettings.model_fields}
    if problem.key == "proxmox_api" and isinstance(problem.value, dict):
        return Problem(problem.key, sorted(problem.value), problem.message, problem.fix)
    if problem.key not in known and problem.key != "proxmox_api":
        return Problem(problem.key, "(hidden)", problem.message, problem.fix)
    return problem


def load_container(host_name: str, data: Mapping[str, object]) -> ContainerSpec | None:
    """A host's container spec, validated; None for a host that is not provisioned by the toolkit."""
    try:
        return _ContainerData.model_validate(data).container
    except ValidationError as exc:
        raise ConfigError(host_name, problems_from(exc, _ContainerData)) from None
