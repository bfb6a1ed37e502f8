"""Render the files the deploy manages, from the validated Deployment. Pure: no host access.

files = nccl_files(deployment, purelib="/opt/sglang/venvs/sglang-0.5.16.../lib/python3.11/site-packages")
[f.path for f in files]
# ['/etc/sglang/nccl.env', '/etc/nccl.conf', '.../sglang_pve_nccl.py', '.../sglang_pve_nccl.pth']
"""

import hashlib
import math
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sglang_pve.agent import contract, spec
from sglang_pve.config import Deployment, ServerConfig
from sglang_pve.config.replica_set import ReplicaSet
from sglang_pve.config.tp_group import TpRank
from sglang_pve.deploy import escape, paths, sandbox
from sglang_pve.deploy.facts.unit_host import UNKNOWN, UnitHost
from sglang_pve.deploy.operations.files import ManagedFile
from sglang_pve.deploy.operations.releases import Release

TEMPLATES = Path(__file__).resolve().parent / "templates"
_jinja = Environment(
    loader=FileSystemLoader(TEMPLATES),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)
_jinja.filters.update(shquote=shlex.quote, systemd_word=escape.systemd_word, systemd_text=escape.systemd_text)
_jinja.globals.update(systemd_env=escape.systemd_env, marker=contract.MARKER)


def render(template: str, **context) -> str:
    return _jinja.get_template(template).render(**context)


def nccl_env_text(deployment: Deployment) -> str:
    return render("nccl.env.j2", profile=deployment.data.nccl_profile, env=deployment.nccl_env)


# The lines zshrc-block.j2 writes (a whole-line regex): --diff shows the old block's lines of this
# shape only, never a line someone else put there (operations/files.py block `shown`).
NCCL_BLOCK_LINE = r"# NCCL profile \"[\w.-]*\" \(the same values as [\w./-]+\)|export NCCL_\w+=([\w@%+=:,./-]*|'[^']*')"


def nccl_block(deployment: Deployment) -> str:
    """Body of the managed block in the user's shell rc (each line matches NCCL_BLOCK_LINE)."""
    return render("zshrc-block.j2", profile=deployment.data.nccl_profile, env=deployment.nccl_env)


def nccl_files(deployment: Deployment, purelib: str) -> list[ManagedFile]:
    env_text = nccl_env_text(deployment)
    module = render("nccl_profile.py.j2", profile=deployment.data.nccl_profile, env=deployment.nccl_env)
    return [
        ManagedFile(paths.NCCL_ENV, env_text),
        ManagedFile(paths.NCCL_CONF, env_text),
        ManagedFile(f"{purelib}/{paths.NCCL_PROFILE_MODULE}.py", module),
        # site.py runs `import` lines of .pth files at every start, before sitecustomize
        ManagedFile(f"{purelib}/{paths.NCCL_PROFILE_MODULE}.pth", f"import {paths.NCCL_PROFILE_MODULE}\n"),
    ]


def logrotate_file() -> ManagedFile:
    """Rotation of the server logs by size (logrotate checks them on its timer, daily by default)."""
    return ManagedFile(paths.LOGROTATE, render("logrotate.j2", log_dir=paths.LOG_DIR, max_size="1G", keep=4))


def tp_rank(deployment: Deployment, server: ServerConfig) -> TpRank | None:
    """The host's rank in the TP group that runs `server`, if it is one."""
    tp = deployment.tp
    return tp if tp is not None and tp.server == server.name else None


def server_yaml(server: ServerConfig, secrets: dict | None = None, tp: TpRank | None = None) -> str:
    """SGLang's --config YAML; with `secrets` ({"api-key": Secret}) the root-only copy the unit loads;
    a TP group member's with its --nnodes, --node-rank and rank 0's --dist-init-addr."""
    flags = (
        server.args.as_flags()
        | (tp.flags if tp else {})
        | {flag: secret.value for flag, secret in (secrets or {}).items()}
    )
    flags_yaml = yaml.safe_dump(flags, sort_keys=False, default_flow_style=False).rstrip("\n")
    return render("server.yaml.j2", server=server.name, flags_yaml=flags_yaml)


def secret_env_text(secrets: dict) -> str:
    """An EnvironmentFile; values are single-quoted (the secret alphabet has no quote, $ or blank)."""
    lines = [f"{name}='{secret.value}'\n" for name, secret in secrets.items()]
    return f"# {contract.MARKER}: secret environment of the server units (root-only).\n" + "".join(lines)


def lifecycle_spec(server: ServerConfig, tp: TpRank | None = None) -> spec.Spec:
    """The agent's view of one server, passed through the agent's own parser (so the deploy can
    never write a spec the agent refuses; sglang_pve/agent/spec.py documents the format)."""
    args = server.args
    group = (
        {
            "name": tp.group,
            "rank": tp.rank,
            "nnodes": tp.nnodes,
            "dist_init_port": tp.dist_init_port,
            "addresses": list(tp.addresses),
            "rank0_port": args.port or paths.SGLANG_DEFAULT_PORT,
        }
        if tp
        else None
    )
    return spec.parse(
        {
            "server": server.name,
            "unit": paths.unit_name(server.name),
            "unit_prefix": paths.UNIT_PREFIX,
            "log": paths.log_path(server.name),
            "host": contract.probe_address(args.host),
            "port": args.port or paths.SGLANG_DEFAULT_PORT,
            "speculative": args.speculative,
            **server.lifecycle.model_dump(),
            "state_dir": paths.STATE_DIR,
            "diagnoses_dir": paths.DIAGNOSES_DIR,
            "group": group,
        },
        paths.lifecycle_path(server.name),
    )


def _unit(deployment: Deployment, server: ServerConfig, venv: str, host: UnitHost) -> str:
    life, tp = server.lifecycle, tp_rank(deployment, server)
    return render(
        "sglang-server.service.j2",
        server=server.name,
        unit=paths.unit_name(server.name),
        model=server.args.served_model_name or server.args.model_path,
        conflicts=[paths.unit_name(n) for n in deployment.servers if n != server.name],
        after=[paths.unit_name(n) for n in sorted(deployment.servers) if n < server.name],
        before=[paths.unit_name(n) for n in sorted(deployment.servers) if n > server.name],
        nccl_env_path=paths.NCCL_ENV,
        nccl_env_sha1=hashlib.sha1(nccl_env_text(deployment).encode()).hexdigest(),
        venv=venv,
        config_path=paths.server_config_path(server.name),
        log_path=paths.log_path(server.name),
        agent=paths.AGENT,
        python=contract.TARGET_PYTHON,
        spec_path=paths.lifecycle_path(server.name),
        # The gate fails the start itself at startup_timeout_s; systemd's timeout is the backstop,
        # with room for prestart (GPU reaping, restart backoff) and the diagnosis (nvidia-smi, py-spy).
        timeout_start_s=math.ceil(life.startup_timeout_s + life.gpu_free_timeout_s + life.watchdog.backoff_max_s + 90),
        # TimeoutStopSec also bounds ExecStopPost, which waits up to gpu_free_timeout_s.
        timeout_stop_s=math.ceil(life.stop_timeout_s + life.gpu_free_timeout_s + 40),
        limits=deployment.data.unit_limits,
        user=deployment.data.server_user,
        identity=sandbox.identity(deployment.data.server_user, deployment.data.server_groups),
        sandbox=(
            *sandbox.for_systemd(host.systemd),
            sandbox.ip_allow(
                (*host.addresses, *host.peers, *(tp.addresses if tp else ())), deployment.data.server_clients
            ),
        ),
        runtime_dirs=deployment.data.server_runtime_dirs,
        home_name=paths.SERVER_HOME,
        # set for the server alone, by env(1) in ExecStart (the root steps get none of it)
        server_env={**(paths.server_home_env() if deployment.data.server_user != "root" else {}), **server.env},
        secret_config_path=paths.secret_config_path(server.name) if deployment.secrets.flags else None,
        secret_env_path=paths.secret_env_path(server.name) if deployment.secrets.env else None,
    )


def release(
    deployment: Deployment,
    venv: str,
    purelib: str,
    user: str | None = None,
    commit: str | None = None,
    host: UnitHost = UNKNOWN,
) -> Release:
    """The release this deployment runs: every rendered file the toolkit overwrites (the NCCL
    files, the venv's startup hook, every configuration's unit, YAML and lifecycle spec) by
    digest, and the shell rc's managed block. The agent is the toolkit's own, not part of it."""
    files = nccl_files(deployment, purelib) + [
        f for s in deployment.servers.values() for f in server_files(deployment, s, venv, host)
    ]
    data = deployment.data
    return Release(
        sglang_version=deployment.sglang_version,
        venv=venv,
        active_server=data.active_server,
        units=tuple(paths.unit_name(name) for name in deployment.servers),
        nccl_profile=data.nccl_profile,
        files={f.path: f.sha256 for f in files},
        secrets=tuple(f.path for f in files if f.secret),
        blocks={data.shell_rc: {"marker": paths.NCCL_BLOCK_MARKER, "body": nccl_block(deployment)}},
        user=user,
        commit=commit,
    )


def server_files(
    deployment: Deployment, server: ServerConfig, venv: str, host: UnitHost = UNKNOWN
) -> list[ManagedFile]:
    """Unit, SGLang config and lifecycle spec of one server configuration, and its secret files
    (`host`: the host's systemd version and addresses, the UnitHostInfo fact)."""
    secrets, tp = deployment.secrets, tp_rank(deployment, server)
    return (
        [
            ManagedFile(paths.unit_path(server.name), _unit(deployment, server, venv, host)),
            ManagedFile(paths.server_config_path(server.name), server_yaml(server, tp=tp)),
            ManagedFile(paths.lifecycle_path(server.name), spec.to_json(lifecycle_spec(server, tp))),
        ]
        + (
            [
                ManagedFile(
                    paths.secret_config_path(server.name),
                    server_yaml(server, secrets.flags, tp),
                    mode="600",
                    secret=True,
                )
            ]
            if secrets.flags
            else []
        )
        + (
            [ManagedFile(paths.secret_env_path(server.name), secret_env_text(secrets.env), mode="600", secret=True)]
            if secrets.env
            else []
        )
    )


def router_args(replica_set: ReplicaSet, workers: list[str]) -> list[str]:
    """launch_router's arguments (sglang_router/router_args.py, 0.3.2): addresses, workers, policy,
    its own metrics, then the set's options. The key is the launcher's (router_files)."""
    router = replica_set.router
    args = ["--host", router.bind, "--port", str(router.port), "--policy", router.policy]
    args += ["--prometheus-host", router.bind, "--prometheus-port", str(router.prometheus_port)]
    args += ["--worker-urls", *workers] if workers else []
    return args + router.flags()


def router_files(
    deployment: Deployment,
    name: str,
    replica_set: ReplicaSet,
    venv: str,
    workers: list[str],
    host: UnitHost = UNKNOWN,
) -> list[ManagedFile]:
    """The router unit of replica set `name`, its launcher, and its key (the host's api-key) when it
    has one. Its IP allow list: the host's own addresses, its workers' (a worker URL by name cannot
    be allowed: give the replica a static address) and server_clients, the router's clients."""
    hosts = [h for h in (urlsplit(url).hostname or "" for url in workers) if sandbox.is_address(h)]
    allow = sandbox.ip_allow((*host.addresses, *hosts), deployment.data.server_clients)
    key = deployment.secrets.api_key
    unit = render(
        "sglang-router.service.j2",
        replica_set=name,
        version=deployment.data.router_version,
        identity=sandbox.identity(paths.ROUTER_USER, []),
        sandbox=(*sandbox.for_systemd(host.systemd), allow),
        key_path=paths.router_key_path(name) if key else None,
        venv=venv,
        launcher=paths.ROUTER_LAUNCHER,
        args=router_args(replica_set, workers),
        # the router's own drain (--shutdown-grace-period-secs, 180 s by default) fits in it
        timeout_stop_s=int(replica_set.router.options.get("shutdown-grace-period-secs", 180)) + 30,
        log_path=paths.router_log_path(name),
    )
    files = [
        ManagedFile(paths.router_unit_path(name), unit),
        ManagedFile(paths.ROUTER_LAUNCHER, render("router_launch.py.j2")),
    ]
    if key:
        files.append(ManagedFile(paths.router_key_path(name), f"{key.value}\n", mode="600", secret=True))
    return files
