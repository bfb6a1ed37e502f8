"""What the deploy and the agent agree on, defined once, here (stdlib only: it ships in the zipapp).

The deploy side (sglang_pve/deploy/paths.py, the pydantic model in sglang_pve/config/, render.py and the
templates) imports these; the agent reads them directly. Nothing else spells them.
"""

import re

UNIT_PREFIX = "sglang-"  # every unit of this toolkit; SGLANG_PVE_UNIT=<prefix>... marks our processes
UNIT_DIR = "/etc/systemd/system"
ETC_DIR = "/etc/sglang"
SERVERS_DIR = f"{ETC_DIR}/servers"  # NAME.yaml (SGLang --config) and NAME.lifecycle.json (spec.py)
LOG_DIR = "/var/log/sglang"
AGENT = "/opt/sglang-pve/sglang-pve-agent.pyz"
STATE_DIR = "/var/lib/sglang-pve"
RUN_DIR = "/run/sglang-pve"  # tmpfs: markers that must not depend on a writable state directory
DIAGNOSES_DIR = f"{STATE_DIR}/diagnoses"
RELEASES_DIR = f"{STATE_DIR}/releases"  # <id>.json records, blobs/ of the files they restore (release_store.py)
# The deploy lock's count, in RELEASES_DIR (agent/lease.py): odd while a run or an agent command
# holds the lock, even once it let go; every taking moves it on. A converging run reads it before
# anything else (deploy/facts/host_basics.py) and takes the lock only at its first change, refusing
# when the count moved meanwhile (deploy/operations/lock.py): a run that changes nothing takes nothing.
LOCK_COUNT = ".lock.count"
# A benchmark in progress: {"run_id", "before" (the configuration that ran before it, or null),
# "started"}, written by the controller's bench before its first start and removed after its
# last; found by a later run (which holds the deploy lock, so that bench is dead): it restores "before".
BENCH_MARK = f"{STATE_DIR}/bench/in-progress.json"
# A replica out of its router on purpose, until router-join: {"router", "address", "since", "marker"},
# written by the agent's router-leave (a bench; a restart provisioning owes) and removed by router-join;
# the router's worker sync (deploy/operations/router.py router_workers) does not add it back meanwhile.
ROUTER_LEFT = f"{STATE_DIR}/router-left.json"
# node_exporter's textfile collector directory: Debian's prometheus-node-exporter (1.5.0-1) has
# this default compiled in (its /etc/default/prometheus-node-exporter says ARGS=""; its
# README.textfile names the directory); the deploy passes it as --collector.textfile.directory.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
SECRETS_DIR = f"{ETC_DIR}/secrets"  # root-only (0600) files: SGLang's config with its keys, secret environment
# The first line of every file the toolkit writes whole carries this; a file or unit without it
# (an operator's own sglang-router.service) is never changed or removed.
MARKER = "Managed by sglang-pve"

# The interpreter every unit runs the agent with, and the oldest the agent runs on (it uses
# 3.11's stdlib); preflight asks the host for this interpreter's version and refuses older ones.
TARGET_PYTHON = "/usr/bin/python3"
MIN_PYTHON = (3, 11)

# A server configuration's name becomes part of a unit name and of file names.
SERVER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,47}")
SERVER_NAME_RULE = "1-48 lower-case letters, digits, - or _, starting with a letter or digit"


def unit_name(server: str) -> str:
    return f"{UNIT_PREFIX}{server}.service"


def unit_path(server: str) -> str:
    return f"{UNIT_DIR}/{unit_name(server)}"


def server_config_path(server: str) -> str:
    return f"{SERVERS_DIR}/{server}.yaml"


def lifecycle_path(server: str, servers_dir: str = SERVERS_DIR) -> str:
    return f"{servers_dir}/{server}.lifecycle.json"


def secret_config_path(server: str) -> str:
    """SGLang's config of `server` plus its API keys, handed to the server by LoadCredential=."""
    return f"{SECRETS_DIR}/{server}.yaml"


def secret_env_path(server: str) -> str:
    return f"{SECRETS_DIR}/{server}.env"


def server_paths(server: str) -> list[str]:
    """Every file the deploy writes for one configuration and only it reads (besides the shared
    NCCL files and venv): its unit, SGLang config, lifecycle spec, and secret config and environment."""
    return [
        unit_path(server),
        server_config_path(server),
        lifecycle_path(server),
        secret_config_path(server),
        secret_env_path(server),
    ]


def log_path(server: str) -> str:
    return f"{LOG_DIR}/{server}.log"


def probe_address(bind: str | None) -> str:
    """Where to send health probes for a server bound to `bind` (wildcards mean the loopback of
    the same family: `::` answers on ::1, and on 127.0.0.1 only where IPv6 sockets are dual-stack)."""
    if bind is None:
        return "127.0.0.1"
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(bind, bind)
