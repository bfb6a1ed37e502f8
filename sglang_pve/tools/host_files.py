"""What the measurement tasks chose per host, as files under group_data/ that the inventories read
as host data (`with_measured(hosts)`), for the next deploy:

    group_data/nccl_measured.yml    nccl_profile    tasks/nccl_probe.py --data write=1 (nccl/measured.py)
    group_data/bench_promoted.yml   active_server   tasks/bench.py --data promote=1 (bench/promote.py)

Each maps a host name to its entry (the key, when and why); a task sets its host's entry
atomically and keeps the others. The user's own group_data files are never rewritten: a value
here is host data, above group data and the toolkit's default, below `--data key=...` (pyinfra's
precedence); delete a host's entry to go back to what group data says.

SGLANG_PVE_HOST_DATA_DIR, when set, holds these files instead of the project's group_data/: for a
checkout that must stay as cloned, and for the lab's parallel test slots, whose hosts share names
(sglang1 in every slot) and would otherwise read each other's promotions.
"""

import os
import tempfile
from pathlib import Path

import yaml

NCCL_MEASURED = Path("group_data") / "nccl_measured.yml"
BENCH_PROMOTED = Path("group_data") / "bench_promoted.yml"
KEYS = {NCCL_MEASURED: "nccl_profile", BENCH_PROMOTED: "active_server"}  # the host-data key each sets
HOST_DATA_DIR = "SGLANG_PVE_HOST_DATA_DIR"


def located(project_dir: Path, name: Path) -> Path:
    """Where the file `name` (one of KEYS) is: under the project, or in $SGLANG_PVE_HOST_DATA_DIR."""
    elsewhere = os.environ.get(HOST_DATA_DIR)
    return Path(elsewhere) / name.name if elsewhere else project_dir / name


def host_key(host_name: str) -> str:
    """An inventory name with its connector, @pveguest/pve1-sglang -> the host, pve1-sglang."""
    return host_name.rsplit("/", 1)[-1]


def load(project_dir: Path, name: Path) -> dict:
    path = located(project_dir, name)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    return data if isinstance(data, dict) else {}


def set_entry(project_dir: Path, name: Path, header: str, host_name: str, entry: dict) -> Path:
    """Set `host_name`'s entry, atomically (temp file + rename); `header`: the file's first comment."""
    data = load(project_dir, name)
    data[host_key(host_name)] = entry
    path = located(project_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.stem}.", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(header + yaml.safe_dump(data, sort_keys=True))
    os.replace(temp, path)
    return path


def with_measured(hosts: list[tuple[str, dict]], project_dir: Path | None = None) -> list[tuple[str, dict]]:
    """Inventory entries with each host's measured nccl_profile and promoted active_server added."""
    files = {name: load(project_dir or Path.cwd(), name) for name in KEYS}
    out = []
    for host, data in hosts:
        chosen = {}
        for name, key in KEYS.items():
            entry = files[name].get(host_key(host))
            if isinstance(entry, dict) and entry.get(key):
                chosen[key] = entry[key]
        out.append((host, {**data, **chosen}))
    return out
