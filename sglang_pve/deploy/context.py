"""The validated Deployment of the host pyinfra is currently preparing, built once per host."""

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config import ConfigError, Deployment, Problem, load_deployment
from sglang_pve.config.deployment import NIGHTLY, HostData
from sglang_pve.config.indexes import read_index_logins
from sglang_pve.config.replica_set import ROUTER_DISTRIBUTION
from sglang_pve.deploy import index, paths, replicas, sandbox
from sglang_pve.deploy.facts.host_basics import Basics, HostBasics
from sglang_pve.deploy.facts.unit_host import UnitHost
from sglang_pve.deploy.operations import venvs
from sglang_pve.deploy.operations.files import ManagedFile

_deployments: dict[str, Deployment] = {}


def deployment() -> Deployment:
    """Validate host.data on first use (raises ConfigError before any remote change)."""
    if host.name not in _deployments:
        project = Path(state.cwd or os.getcwd())
        try:
            hosts = {other.name: other.data.dict() for other in state.inventory}  # TP groups span hosts
            _deployments[host.name] = load_deployment(host.name, host.data.dict(), project, _resolve, hosts)
        except ConfigError as error:
            raise PyinfraError(str(error)) from None  # pyinfra prints it plainly, no traceback
    return _deployments[host.name]


def task_options(loader):
    """A task's options validated from host.data by `loader(host name, data, deployment)`;
    a ConfigError stops the run plainly, before any remote change."""
    config = deployment()
    try:
        return loader(host.name, host.data.dict(), config)
    except ConfigError as error:
        raise PyinfraError(str(error)) from None


def _resolve(data: HostData) -> str:
    """An exact version as is; a nightly spec resolved on the controller, printed once per run."""
    spec = data.sglang_version
    if not NIGHTLY.fullmatch(spec):
        return spec
    urls = (data.sglang_index_url, *data.sglang_extra_index_urls)
    logins, _ = read_index_logins(data)  # load_deployment reported their problems before it resolves
    cached = index.resolve_nightly.cache_info().currsize
    try:
        version = index.resolve_nightly(spec, urls, logins)
    except index.IndexLookupError as error:
        raise ConfigError(
            host.name, [Problem("sglang_version", spec, str(error), "pin an exact version, or check the index URLs")]
        ) from None
    if index.resolve_nightly.cache_info().currsize > cached:
        logger.info(f"sglang_version {spec} resolved to {version} ({', '.join(urls)})")
    return version


def package_source(hooks: Iterable[ManagedFile] = ()) -> venvs.Source:
    """Indexes, installer and import check of this host's SGLang venvs (hooks: files each gets)."""
    config = deployment()
    data = config.data
    return venvs.Source(
        index_url=data.sglang_index_url,
        extra_index_urls=tuple(data.sglang_extra_index_urls),
        installer=data.sglang_installer,
        uv_version=data.uv_version,
        uv_sha256=tuple(data.uv_sha256),
        index_packages=tuple(data.sglang_index_packages),
        sdist_allowed=tuple(data.sglang_sdist_allowed),
        import_check=tuple(data.sglang_import_check),
        hooks=tuple(hooks),
        logins=config.index_logins,
    )


def venv() -> str:
    config = deployment()
    return paths.venv_path(config.data.sglang_venvs_dir, config.sglang_version)


_basics: dict[tuple[str, str], Basics] = {}


def basics() -> Basics:
    """The host's unit facts, its venv's site-packages and its NVIDIA user-space driver, asked once
    per run in one command (the units, the release record, the NCCL hook and preflight need them;
    pyinfra 3 keeps no fact cache)."""
    key = (host.name, venv())
    if key not in _basics:
        _basics[key] = host.get_fact(HostBasics, venv=venv())
    return _basics[key]


def known_basics(found: Basics) -> None:
    """What the preflight read of them in its one command (facts/preflight.py PreflightRead): the
    rest of the run asks nothing again."""
    _basics.setdefault((host.name, venv()), found)


def site_packages() -> str:
    """site-packages of this host's venv. None only where the host lacks the interpreter it asks
    (preflight refuses such a host): an error, not a path under "None/"."""
    found = basics().site_packages
    if found is None:
        raise PyinfraError(f"{host.name}: {paths.TARGET_PYTHON} cannot be asked for the venv's site-packages")
    return found


_unit_hosts: dict[str, UnitHost] = {}


def unit_host() -> UnitHost:
    """The host's systemd version and own addresses (the units and the release record render from
    them), and its peers from the inventory: the router of the replica set it serves in reaches its
    server (an address: a router reached by name cannot be allowed)."""
    if host.name not in _unit_hosts:
        member = replicas.member_of(host)
        router = replicas.address(replicas.named_host(member[1].router.host)) if member else None
        peers = (router,) if router and sandbox.is_address(router) else ()
        _unit_hosts[host.name] = dataclasses.replace(basics().unit_host, peers=peers)
    return _unit_hosts[host.name]


def router_source() -> venvs.Source:
    """SGLang's router (sglang-router) from sglang_index_url alone, wheels only, locked like SGLang's venvs."""
    data = deployment().data
    return venvs.Source(
        index_url=data.sglang_index_url,
        installer=data.sglang_installer,
        uv_version=data.uv_version,
        uv_sha256=tuple(data.uv_sha256),
        import_check=("sglang_router", "sglang_router.sglang_router_rs"),
        project=ROUTER_DISTRIBUTION,
    )
