"""What the Proxmox VE emulator asks of the machine: the part pve-container and pve-storage play.

The emulator (lab.pve) owns the API, the validation and the config files under /etc/pve/lxc/; every
real action goes through one backend object with the methods of `Backend`. Two implementations:

- `DirBackend` (here): directories stand in for volumes and a JSON file records running/stopped.
  Unit tests (the emulator's and the toolkit's) use it; nothing real is started.
- the real-LXC backend (lab side, talking to the lab host's guestd): the same methods turn the
  Proxmox config into a sibling LXC system container, as pve-container would.

Contract (all methods):
- ``vmid`` is an int; ``name`` a snapshot name already validated (pve-configid).
- They run inside a task worker thread of the emulator while the emulator holds the CT's config
  lock, never two at a time for one vmid; they may block (the task stays "running" meanwhile).
- Failure: raise `BackendError` with a message a person can act on; it becomes the task's
  exitstatus (and last log line), exactly as a Perl `die` in a PVE worker does. Any other
  exception is a bug, but is reported the same way.
- ``config`` is the container's current section parsed as ``{key: value}`` (strings as written in
  the file, raw ``lxc.*`` lines under key "lxc" as a list of (key, value) pairs), ``config_text``
  the current section exactly as in /etc/pve/lxc/<vmid>.conf (the lines above the first
  ``[section]``): what `pct start` would read.
- Volume ids are PVE's: ``local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst`` (template),
  ``local-lvm:vm-101-disk-0`` / ``local-zfs:subvol-101-disk-0`` (rootfs, allocated by the
  emulator from ``rootfs: STORAGE:SIZE`` before `create` is called).

>>> b = DirBackend("/tmp/pve-doctest-backend", devices={"/dev/null": ("c", 1, 3)})
>>> b.device("/dev/null"), b.device("/dev/nvidia-uvm")
(('c', 1, 3), None)
"""

import json
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Protocol


class BackendError(Exception):
    """A real action failed; the message becomes the task's exit status."""


class Backend(Protocol):
    def create(
        self, vmid: int, config: dict, template_volid: str, rootfs_volume: str, ssh_public_keys: str | None = None
    ) -> None:
        """Allocate ``rootfs_volume`` and unpack ``template_volid`` into it (task vzcreate);
        ``ssh_public_keys`` (the create call's ``ssh-public-keys``, one key per line) go into
        the rootfs's /root/.ssh/authorized_keys as pve-container's setup does."""

    def destroy(self, vmid: int) -> None:
        """Remove the container's volumes, snapshots and runtime state (task vzdestroy).
        The CT is stopped when this is called."""

    def start(self, vmid: int, config_text: str) -> None:
        """Start the container from its current config (task vzstart); returns once it runs."""

    def stop(self, vmid: int) -> None:
        """Stop immediately (task vzstop), like `lxc-stop --kill`."""

    def shutdown(self, vmid: int, timeout: int) -> None:
        """Clean shutdown, waiting at most ``timeout`` s (task vzshutdown); raise BackendError
        when it did not stop in time (the emulator then applies forceStop if asked)."""

    def status(self, vmid: int) -> str:
        """ "running" or "stopped" (a container the backend does not know is "stopped")."""

    def hotplug(self, vmid: int, key: str, old: str | None, new: str | None) -> None:
        """Apply one config change to the running container, as pve-container's
        vmconfig_hotplug_pending does (src/PVE/LXC/Config.pm; LXC.pm update_net,
        mountpoint_hotplug, device_passthrough_hotplug; the cgroup for memory, swap, cpulimit,
        cpuunits): ``old`` the current value (None: the key is new), ``new`` None: removed.
        BackendError when it cannot: the PUT then fails, nothing written."""

    def snapshot(self, vmid: int, name: str) -> None:
        """Snapshot the root filesystem volume (task vzsnapshot)."""

    def rollback(self, vmid: int, name: str) -> None:
        """Put the root filesystem back to snapshot ``name`` (task vzrollback); the CT is
        stopped when this is called."""

    def delete_snapshot(self, vmid: int, name: str) -> None:
        """Remove snapshot ``name`` of the root filesystem (task vzdelsnapshot)."""

    def device(self, path: str) -> tuple[str, int, int] | None:
        """The node's device ``path`` (e.g. /dev/nvidia-uvm) as (kind, major, minor), kind "c"
        (char) or "b" (block), or ("-", 0, 0) for something that is not a device node; None when
        the path does not exist. devN checks and the cgroup allow rules come from here."""


class DirBackend:
    """Volumes as directories under ``root``, running state in ``root/state.json``.

    Layout: ``root/volumes/<volume id with ':' -> '/'>/`` (the rootfs: the template's name is
    written into ``TEMPLATE`` there), ``root/snapshots/<vmid>/<name>/`` (copies of the rootfs).
    ``devices`` maps node paths to (kind, major, minor); without it `device` stats the real path.
    ``fail`` maps a method name to a message: that call raises BackendError (tests of task errors).
    """

    def __init__(self, root, devices: dict | None = None, fail: dict | None = None):
        self.root = Path(root)
        self.devices = devices
        self.fail = fail or {}
        self._lock = threading.Lock()

    # -- state --------------------------------------------------------------------------------
    def _state_file(self) -> Path:
        return self.root / "state.json"

    def _states(self) -> dict:
        try:
            return json.loads(self._state_file().read_text())
        except FileNotFoundError:
            return {}

    def _set_state(self, vmid: int, state: str | None) -> None:
        with self._lock:
            states = self._states()
            if state is None:
                states.pop(str(vmid), None)
            else:
                states[str(vmid)] = state
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self._state_file().with_suffix(".tmp")
            tmp.write_text(json.dumps(states, sort_keys=True))
            tmp.replace(self._state_file())

    def _check_fail(self, method: str) -> None:
        if method in self.fail:
            raise BackendError(self.fail[method])

    def volume_dir(self, volid: str) -> Path:
        """The directory standing in for volume ``volid``."""
        return self.root / "volumes" / volid.replace(":", "/", 1)

    def _rootfs_dir(self, vmid: int) -> Path:
        record = self.root / "rootfs" / str(vmid)
        try:
            return self.volume_dir(record.read_text().strip())
        except FileNotFoundError:
            raise BackendError(f"volume of CT {vmid} does not exist") from None

    def _snapshot_dir(self, vmid: int, name: str) -> Path:
        return self.root / "snapshots" / str(vmid) / name

    # -- Backend ------------------------------------------------------------------------------
    def create(self, vmid, config, template_volid, rootfs_volume, ssh_public_keys=None):
        self._check_fail("create")
        volume = self.volume_dir(rootfs_volume)
        if volume.exists():
            raise BackendError(f"volume '{rootfs_volume}' already exists")
        volume.mkdir(parents=True)
        (volume / "TEMPLATE").write_text(template_volid + "\n")
        if ssh_public_keys:
            (volume / "root" / ".ssh").mkdir(parents=True)
            (volume / "root" / ".ssh" / "authorized_keys").write_text(ssh_public_keys + "\n")
        record = self.root / "rootfs" / str(vmid)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(rootfs_volume + "\n")
        self._set_state(vmid, "stopped")

    def destroy(self, vmid):
        self._check_fail("destroy")
        record = self.root / "rootfs" / str(vmid)
        if record.exists():
            shutil.rmtree(self._rootfs_dir(vmid), ignore_errors=True)
            record.unlink()
        shutil.rmtree(self.root / "snapshots" / str(vmid), ignore_errors=True)
        self._set_state(vmid, None)

    def start(self, vmid, config_text):
        self._check_fail("start")
        self._rootfs_dir(vmid)  # a CT without a volume cannot start
        (self.root / "started").mkdir(parents=True, exist_ok=True)
        (self.root / "started" / f"{vmid}.conf").write_text(config_text)
        self._set_state(vmid, "running")

    def stop(self, vmid):
        self._check_fail("stop")
        self._set_state(vmid, "stopped")

    def shutdown(self, vmid, timeout):
        self._check_fail("shutdown")
        self._set_state(vmid, "stopped")

    def status(self, vmid):
        return self._states().get(str(vmid), "stopped")

    def hotplug(self, vmid, key, old, new):
        """Recorded in ``root/hotplugged.jsonl``, one JSON line per change (tests read it)."""
        self._check_fail("hotplug")
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / "hotplugged.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps({"vmid": vmid, "key": key, "old": old, "new": new}) + "\n")

    def hotplugged(self) -> list[dict]:
        try:
            text = (self.root / "hotplugged.jsonl").read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines()]

    def snapshot(self, vmid, name):
        self._check_fail("snapshot")
        target = self._snapshot_dir(vmid, name)
        if target.exists():
            raise BackendError(f"snapshot '{name}' of CT {vmid} already exists on the volume")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self._rootfs_dir(vmid), target, symlinks=True)

    def rollback(self, vmid, name):
        self._check_fail("rollback")
        source = self._snapshot_dir(vmid, name)
        if not source.is_dir():
            raise BackendError(f"snapshot '{name}' of CT {vmid} does not exist on the volume")
        rootfs = self._rootfs_dir(vmid)
        shutil.rmtree(rootfs)
        shutil.copytree(source, rootfs, symlinks=True)

    def delete_snapshot(self, vmid, name):
        self._check_fail("delete_snapshot")
        shutil.rmtree(self._snapshot_dir(vmid, name), ignore_errors=True)

    def device(self, path):
        if self.devices is not None:
            return self.devices.get(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
            return kind, os.major(st.st_rdev), os.minor(st.st_rdev)
        return "-", 0, 0
