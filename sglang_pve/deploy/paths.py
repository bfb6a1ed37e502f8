"""Where the toolkit puts things on a target. The agent's contract (agent/contract.py) defines
what the agent also reads; this adds what only the deploy writes."""

from sglang_pve.agent.contract import (  # noqa: F401 - re-exported for the deploy side
    AGENT,
    BENCH_MARK,
    DIAGNOSES_DIR,
    ETC_DIR,
    LOG_DIR,
    RELEASES_DIR,
    ROUTER_LEFT,
    SECRETS_DIR,
    SERVERS_DIR,
    STATE_DIR,
    TARGET_PYTHON,
    UNIT_DIR,
    UNIT_PREFIX,
    lifecycle_path,
    log_path,
    secret_config_path,
    secret_env_path,
    server_config_path,
    server_paths,
    unit_name,
    unit_path,
)

NCCL_ENV = f"{ETC_DIR}/nccl.env"  # EnvironmentFile= of every server unit
NCCL_CONF = "/etc/nccl.conf"  # read by NCCL itself in every process
NCCL_PROFILE_MODULE = "sglang_pve_nccl"  # in the venv's site-packages, imported by a .pth of the same name
NCCL_BLOCK_MARKER = "nccl-profile"  # names the managed block in the user's shell rc
UV_VENV = "/opt/sglang-pve/uv"  # the installer, in its own venv (sglang_installer: uv)
LOGROTATE = "/etc/logrotate.d/sglang-pve"
SGLANG_DEFAULT_PORT = 30000  # SGLang's own, when a configuration sets no port
INDEX_NETRC = f"{SECRETS_DIR}/index.netrc"  # credentials of the index URLs, read by pip and uv through NETRC=
SERVER_HOME = "sglang"  # StateDirectory=/CacheDirectory= name: /var/lib/sglang, /var/cache/sglang


def venv_path(venvs_dir: str, version: str) -> str:
    """One virtualenv per pinned SGLang version; the local version label (+g<sha>) is kept."""
    return f"{venvs_dir}/sglang-{version}"


def lock_path(venv: str) -> str:
    """The venv's lock, beside it: every distribution with its sha256 (root-only)."""
    return f"{venv}.lock"


def partial_venv_path(venv: str, run: str = "") -> str:
    """Where run `run` (provenance.run_token) builds a venv before it is moved into place (a unit
    never points here); "" gives the prefix every run's build of this venv starts with. Per run:
    a build a killed controller left running on the host cannot be wiped by the next one's."""
    head, _, name = venv.rpartition("/")
    return f"{head}/.{name}.partial" + (f"-{run}" if run else "")


def server_home_env(state: str = f"/var/lib/{SERVER_HOME}", cache: str = f"/var/cache/{SERVER_HOME}") -> dict[str, str]:
    """Where the sandboxed server's home and JIT/model caches live (it may write nowhere else):
    the unit's Environment=, and tests/gpu's least-privilege run on a real GPU."""
    return {
        "HOME": state,
        "XDG_CACHE_HOME": cache,
        "HF_HOME": f"{cache}/huggingface",
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "FLASHINFER_WORKSPACE_BASE": cache,
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
    }


# SGLang's router of a replica set (deploys/router.py): its own unit, venv, launcher, key and log.
# not UNIT_PREFIX ("sglang-"): the servers' unit op removes every marked sglang-*.service it does not declare
ROUTER_UNIT_PREFIX = "sgl-router-"
ROUTER_LAUNCHER = f"{ETC_DIR}/router_launch.py"
ROUTER_USER = "sglang-router"  # its DynamicUser, whatever server_user is


def router_unit_name(replica_set: str) -> str:
    return f"{ROUTER_UNIT_PREFIX}{replica_set}.service"


def router_unit_path(replica_set: str) -> str:
    return f"{UNIT_DIR}/{router_unit_name(replica_set)}"


def router_key_path(replica_set: str) -> str:
    return f"{SECRETS_DIR}/router-{replica_set}.key"


def router_log_path(replica_set: str) -> str:
    return f"{LOG_DIR}/router-{replica_set}.log"


def router_venv_path(venvs_dir: str, version: str) -> str:
    """One virtualenv per pinned sglang-router version, beside SGLang's."""
    return f"{venvs_dir}/sglang-router-{version}"
