"""Where the toolkit puts things on a target. One place, so tasks, templates and tests agree."""

ETC_DIR = "/etc/sglang"
NCCL_ENV = f"{ETC_DIR}/nccl.env"  # EnvironmentFile= of every server unit
NCCL_CONF = "/etc/nccl.conf"  # read by NCCL itself in every process
NCCL_PROFILE_MODULE = "sglang_pve_nccl"  # in the venv's site-packages, imported by a .pth of the same name
SERVERS_DIR = f"{ETC_DIR}/servers"
LOG_DIR = "/var/log/sglang"
UNIT_DIR = "/etc/systemd/system"
AGENT = "/opt/sglang-pve/sglang-pve-agent.pyz"
STATE_DIR = "/var/lib/sglang-pve"
DIAGNOSES_DIR = f"{STATE_DIR}/diagnoses"
UNIT_PREFIX = "sglang-"
SGLANG_DEFAULT_PORT = 30000  # SGLang's own, when a configuration sets no port


def unit_name(server: str) -> str:
    return f"{UNIT_PREFIX}{server}.service"


def unit_path(server: str) -> str:
    return f"{UNIT_DIR}/{unit_name(server)}"


def server_config_path(server: str) -> str:
    return f"{SERVERS_DIR}/{server}.yaml"


def lifecycle_path(server: str) -> str:
    return f"{SERVERS_DIR}/{server}.lifecycle.json"


def log_path(server: str) -> str:
    return f"{LOG_DIR}/{server}.log"


def venv_path(venvs_dir: str, version: str) -> str:
    """One virtualenv per pinned SGLang version; the local version label (+g<sha>) is kept."""
    return f"{venvs_dir}/sglang-{version}"
