"""Defaults for every host. Override per group (group_data/<group>.py), per host
(inventory), or per run (`--data key=value`). Validated by sglang_pve.config before any change."""

# NCCL tuning profiles: name -> {NCCL variable: value}. Exactly one is active everywhere a
# process can start from (units, /etc/nccl.conf, the venv's startup hook, root's .zshrc).
# Measured on 8x PCIe RTX PRO 6000: 89 tok/s with these vs 63 tok/s without (DESIGN.md).
_pcie_tuned = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": 16,
    "NCCL_BUFFSIZE": 16777216,
    "NCCL_NTHREADS": 512,
}
nccl_profiles = {
    "pcie-tuned": _pcie_tuned,
    # Diagnostic: first-collective hangs with P2P on PCIe are cured by this (notes/sglang.md section 4).
    "p2p-disabled": {"NCCL_P2P_DISABLE": 1},
    # NCCL's own defaults: no overrides at all.
    "nccl-defaults": {},
    # Mixed: the tuned profile, but NCCL may still pick Simple for large (prefill) messages, where
    # LL alone measured 2.9x slower than the defaults at 32 MiB on H200 x2 (issue 10).
    "pcie-tuned-ll-simple": {**_pcie_tuned, "NCCL_PROTO": "LL,Simple"},
}
nccl_profile = "pcie-tuned"
# What the host's GPUs spend their all-reduce time on, for tasks/nccl_probe.py's overall verdict:
# single-stream serving is mostly decode-sized (7168 x bf16 x batch) messages.
nccl_workload_mix = {"decode": 0.8, "prefill": 0.2}

# Server configurations (SGLang flag names) and which one runs.
servers_file = "group_data/servers.yml"
active_server = "baseline"

# The SGLang build: an exact version, or "nightly" / "nightly-YYYYMMDD", resolved once per run on
# the controller against the indexes below to the exact nightly (its version names the commit).
# One virtualenv per version under sglang_venvs_dir, built beside its final path and moved into
# place only after the install from a hash-locked resolution and the import check passed.
sglang_version = "0.5.16.dev20260720+g8905cbd42"
sglang_index_url = "https://pypi.org/simple"
sglang_extra_index_urls = ["https://docs.sglang.ai/whl/cu130/"]
sglang_venvs_dir = "/opt/sglang/venvs"
# Installs from the lock: "uv" (installed on the host from sglang_index_url, at uv_version) or "pip".
sglang_installer = "uv"
uv_version = "0.13.9"
# Imported by the new venv's python before it is moved into place: SGLang, torch, the kernel.
sglang_import_check = ["sglang", "torch", "sgl_kernel"]

# Releases (/var/lib/sglang-pve/releases): how many are kept, with their venvs, for rollback.
releases_kept = 5

# Resource limits of every server unit (SGLang raises NOFILE itself, but only up to the hard limit).
unit_limits = {"nofile": 1048576, "memlock": "infinity"}

# The interactive user whose shell gets the managed NCCL block.
shell_user = "root"
shell_rc = "/root/.zshrc"

# Secrets, named by where the controller reads them, never by value: {"env": "VARIABLE"} or
# {"file": "/path/to/0600-file"}. Written on the host only into root-only files (SGLang's config
# copy it loads with LoadCredential=, an EnvironmentFile), never into units, diffs or command lines.
#   sglang_secrets = {"api-key": {"file": "~/.config/sglang-pve/api-key"},
#                     "admin-api-key": {"env": "SGLANG_ADMIN_API_KEY"},
#                     "env": {"HF_TOKEN": {"env": "HF_TOKEN"}}}
sglang_secrets = {}
# A server bound beyond the loopback (servers.yml binds 0.0.0.0) without an api-key is refused by
# preflight; true accepts that, with a warning.
allow_unauthenticated = False

# The servers run as this dedicated user (systemd DynamicUser unless a static user of that name
# exists), sandboxed; "root" runs them unsandboxed, with a warning. server_groups: supplementary
# groups, e.g. ["video"] where /dev/nvidia* are not world-accessible (NVreg_DeviceFileMode).
server_user = "sglang"
server_groups = []
