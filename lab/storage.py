"""Model storage: the host dirs production bind-mounts at /shared and /data, with model
folders whose config.json files are shaped like the real ones (tracked under lab/models/)."""

import shutil

from lab import layout


def populate() -> None:
    """Create storage/shared and storage/data and copy lab/models/<mount>/ into them.

    Files the lab does not track (written by tests or the simulator) are left alone.
    """
    for mount, host_dir in layout.STORAGE_MOUNTS.items():
        host_dir.mkdir(parents=True, exist_ok=True)
        source = layout.MODELS_SOURCE_DIR / mount.lstrip("/")
        if source.is_dir():
            shutil.copytree(source, host_dir, dirs_exist_ok=True)
