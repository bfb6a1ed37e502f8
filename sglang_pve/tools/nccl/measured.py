"""The probe's verdict as each host's `nccl_profile`, for the next deploy: group_data/nccl_measured.yml.

    pve1-sglang:
      nccl_profile: pcie-tuned-ll-simple
      measured: "2026-11-30T12:00:00Z"
      why: "overall (mix decode 0.8, prefill 0.2): ... outside the noise"

The inventories read it as host data (`with_measured(hosts)`): above group data and the toolkit's default,
below `--data nccl_profile=...`, pyinfra's own precedence. Written only when a profile won
outside the noise; the rest of the file (other hosts) is kept.
"""

import os
import tempfile
from pathlib import Path

import yaml

MEASURED_FILE = Path("group_data") / "nccl_measured.yml"
_HEADER = "# Written by tasks/nccl_probe.py --data write=1: each host's measured best NCCL profile.\n"


def load(project_dir: Path) -> dict:
    path = project_dir / MEASURED_FILE
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    return data if isinstance(data, dict) else {}


def write(project_dir: Path, host_name: str, profile: str, measured: str, why: str) -> Path:
    """Set `host_name`'s entry, atomically (temp file + rename)."""
    data = load(project_dir)
    data[host_name] = {"nccl_profile": profile, "measured": measured, "why": why}
    path = project_dir / MEASURED_FILE
    handle, temp = tempfile.mkstemp(prefix=".nccl_measured.", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(_HEADER + yaml.safe_dump(data, sort_keys=True))
    os.replace(temp, path)
    return path


def with_measured(hosts: list[tuple[str, dict]], project_dir: Path | None = None) -> list[tuple[str, dict]]:
    """Inventory entries with each measured host's nccl_profile added to its host data."""
    measured = load(project_dir or Path.cwd())
    out = []
    for name, data in hosts:
        entry = measured.get(name.rsplit("/", 1)[-1])  # "@pveguest/pve1-sglang": the host is pve1-sglang
        profile = entry.get("nccl_profile") if isinstance(entry, dict) else None
        out.append((name, {**data, "nccl_profile": profile} if profile else data))
    return out
