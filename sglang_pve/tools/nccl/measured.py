"""The probe's verdict as each host's `nccl_profile`, for the next deploy: group_data/nccl_measured.yml.

    pve1-sglang:
      nccl_profile: pcie-tuned-ll-simple
      measured: "2026-11-30T12:00:00Z"
      why: "overall (mix decode 0.8, prefill 0.2): ... outside the noise"

The inventories read it as host data (tools/host_files.py with_measured): above group data and the
toolkit's default, below `--data nccl_profile=...`, pyinfra's own precedence. Written only when a
profile won outside the noise; the rest of the file (other hosts) is kept.
"""

from pathlib import Path

from sglang_pve.tools import host_files

MEASURED_FILE = host_files.NCCL_MEASURED
_HEADER = "# Written by tasks/nccl_probe.py --data write=1: each host's measured best NCCL profile.\n"


def load(project_dir: Path) -> dict:
    return host_files.load(project_dir, MEASURED_FILE)


def write(project_dir: Path, host_name: str, profile: str, measured: str, why: str) -> Path:
    """Set `host_name`'s entry, atomically (temp file + rename)."""
    entry = {"nccl_profile": profile, "measured": measured, "why": why}
    return host_files.set_entry(project_dir, MEASURED_FILE, _HEADER, host_name, entry)
