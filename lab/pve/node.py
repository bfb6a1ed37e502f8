"""The emulated node: its name and PVE version, the container configs under ``<state
root>/nodes/<node>/lxc/<vmid>.conf`` (pve-container src/PVE/LXC/Config.pm cfs_config_path; read from
disk on every request, so an edit over SSH is seen), PVE's config locks (flock files, shared with
every other writer on the node: configlock.py), the storage table, the task list and the backend
that does the real work.
"""

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import conf as ctconf
from . import pmxcfs
from .configlock import LOCK_DIR, ConfigLocks, LockTimeout
from .errors import ApiError, param_error, perm_error
from .storage import Storages
from .tasks import Tasks

# What GET /version answers per emulated major version (a recent point release of each).
VERSIONS = {
    8: {"version": "8.4.1", "release": "8.4", "repoid": "2a5fa54a8503f96d"},
    9: {"version": "9.1.1", "release": "9.1", "repoid": "42db4a6cf33dac83"},
}
# POST /nodes/{node}/lxc without `unprivileged`: PVE 9 creates an unprivileged CT (pve-container
# 103068a), PVE 7/8 a privileged one.
UNPRIVILEGED_DEFAULT = {8: 0, 9: 1}


@dataclass
class Request:
    """What a handler gets: the caller, the validated parameters (path ones included), the
    schema's method info, and a task error injected by a fault rule."""

    ident: object
    params: dict
    info: dict = field(default_factory=dict)
    task_error: str | None = None


class Node:
    def __init__(self, name: str, version: int, state_root, backend, storages: Storages = None, lock_dir=LOCK_DIR):
        if version not in VERSIONS:
            raise ValueError(f"PVE version {version}: the emulator knows {sorted(VERSIONS)}")
        self.name = name
        self.version = version
        self.state_root = Path(state_root)
        self.conf_dir = self.state_root / "nodes" / name / "lxc"
        self.backend = backend
        self.storages = storages or Storages()
        self.tasks = Tasks(name)
        self.started = time.time()
        self.locks = ConfigLocks(lock_dir)
        self.ssl_fingerprint: str | None = None  # of the certificate served (server.make_server)

    # -- configs ------------------------------------------------------------------------------
    def conf_path(self, vmid: int) -> Path:
        return self.conf_dir / f"{vmid}.conf"

    def vmids(self) -> list[int]:
        if not self.conf_dir.is_dir():
            return []
        return sorted(int(m[1]) for p in self.conf_dir.iterdir() if (m := re.match(r"^(\d+)\.conf$", p.name)))

    def configs(self):
        """(vmid, parsed config) of every container, skipping one removed meanwhile."""
        for vmid in self.vmids():
            try:
                yield vmid, self.read(vmid)[1]
            except ApiError:
                continue

    def exists(self, vmid: int) -> bool:
        return self.conf_path(vmid).is_file()

    def read(self, vmid: int) -> tuple[str, ctconf.CTConfig]:
        """The file text and its parsed form; PVE's message when it does not exist."""
        try:
            text = self.conf_path(vmid).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ApiError(f"Configuration file 'nodes/{self.name}/lxc/{vmid}.conf' does not exist") from None
        return text, ctconf.parse(text)

    def write(self, vmid: int, config: ctconf.CTConfig) -> str:
        """Write the whole file at once under the config lock (PVE writes only inside
        lock_config); returns its text."""
        text = ctconf.render(config)
        with self.locked(vmid):
            self.conf_dir.mkdir(parents=True, exist_ok=True)  # Config.pm: mkdir /etc/pve/nodes/$nodename/lxc
            pmxcfs.file_set_contents(self.conf_path(vmid), text.encode("utf-8"))
        return text

    def remove(self, vmid: int) -> None:
        self.conf_path(vmid).unlink(missing_ok=True)

    @contextmanager
    def locked(self, vmid: int):
        """PVE's lock_config: one read-modify-write of a CT's config at a time, among every
        writer on the node; its timeout is PVE's error (HTTP 500)."""
        try:
            with self.locks.held(vmid):
                yield
        except LockTimeout as error:
            raise ApiError(str(error)) from None

    def update(self, vmid: int, change) -> ctconf.CTConfig:
        """Under the config lock: read, ``change(config)`` in place, write."""
        with self.locked(vmid):
            _, config = self.read(vmid)
            change(config)
            self.write(vmid, config)
            return config

    def set_lock(self, vmid: int, lock: str | None) -> None:
        def change(config):
            if lock is None:
                config.current.pop("lock", None)
            else:
                config.current["lock"] = lock

        self.update(vmid, change)

    # -- checks shared by the handlers --------------------------------------------------------
    def check_node(self, name: str) -> None:
        if name != self.name:  # a single-node cluster: any other name is unknown
            raise ApiError(
                f"hostname lookup '{name}' failed - failed to get address info for: {name}: Name or service not known",
                500,
            )

    @staticmethod
    def check_lock(config: ctconf.CTConfig) -> None:
        """AbstractConfig::check_lock."""
        if lock := config.current.get("lock"):
            raise ApiError(f"CT is locked ({lock})")

    @staticmethod
    def check_priv(ident, path: str, priv: str) -> None:
        """RPCEnvironment::check: the emulator's users hold all privileges or none."""
        if not ident.privileged:
            raise perm_error(f"{path}, {priv}")

    def running(self, vmid: int) -> bool:
        return self.backend.status(vmid) == "running"

    def device_check(self, path: str) -> None:
        """PVE::LXC::Tools::get_device_mode_and_rdev on the node's /dev."""
        dev = self.backend.device(path)
        if dev is None:
            raise ApiError(f"Device {path} does not exist")
        if dev[0] not in ("c", "b"):
            raise ApiError(f"{path} is not a device")

    def new_disk_storage(self, value: str, default_storage: str) -> tuple[str, str] | None:
        """A mount point volume to allocate ("STORAGE:SIZE" or a bare size): (storage id, size
        in GiB), with the storage checked like PVE's check_and_activate_storage."""
        if re.match(r"^\d+(\.\d+)?$", value):
            sid, size = default_storage, value
        elif m := re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(\.\d+)?)$", value, re.I):
            sid, size = m[1], m[2]
        else:
            return None
        if self.storages.get(sid) is None:
            raise ApiError(f"storage '{sid}' does not exist")
        if "rootdir" not in self.storages.content(sid):
            raise param_error({"storage": f"storage '{sid}' does not support container directories"})
        return sid, size
