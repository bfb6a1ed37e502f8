"""PVE's per-container config lock, taken as PVE takes it, so that the emulator, the lab's pct and
the toolkit's SSH edit (sglang_pve/provision/conffile.py) exclude each other on the node.

- the file: ``/run/lock/lxc/pve-config-<vmid>.lock``, its directory made if missing
  (pve-container src/PVE/LXC/Config.pm: ``mkdir $lockdir``, config_file_lock);
- the lock: an exclusive flock on the file opened for append (``>>``), 10 s to get it, then
  "can't lock file '<path>' - got timeout" (pve-guest-common src/PVE/AbstractConfig.pm lock_config
  -> lock_config_full($vmid, 10); pve-common src/PVE/Tools.pm lock_file_full, run_with_timeout);
- re-entrant within its holder: lock_file_full keeps the handles per process ($lock_handles->{$$})
  and a nested lock_config of the same file runs the code without locking again. The emulator's
  workers are threads, not processes, so here the holder is the thread.

>>> import tempfile, threading
>>> locks = ConfigLocks(tempfile.mkdtemp() + "/lxc", timeout=0.2)
>>> def attempt(results):
...     try:
...         with locks.held(129):
...             results.append("locked")
...     except LockTimeout as error:
...         results.append(str(error))
>>> results = []
>>> with locks.held(129):
...     with locks.held(129):  # nested: no deadlock
...         thread = threading.Thread(target=attempt, args=(results,))
...         thread.start(); thread.join()
>>> attempt(results)
>>> results[0].endswith("pve-config-129.lock' - got timeout"), results[1]
(True, 'locked')
"""

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_DIR = "/run/lock/lxc"
TIMEOUT_S = 10


class LockTimeout(Exception):
    """The lock was not had in time (PVE's message)."""


class ConfigLocks:
    def __init__(self, directory=LOCK_DIR, timeout: float = TIMEOUT_S):
        self.directory = Path(directory)
        self.timeout = timeout
        self._held = threading.local()

    def path(self, vmid: int) -> Path:
        return self.directory / f"pve-config-{vmid}.lock"

    @contextmanager
    def held(self, vmid: int):
        depth = getattr(self._held, "depth", None)
        if depth is None:
            depth = self._held.depth = {}
        if depth.get(vmid):
            depth[vmid] += 1
            try:
                yield
            finally:
                depth[vmid] -= 1
            return
        handle = self._acquire(self.path(vmid))
        depth[vmid] = 1
        try:
            yield
        finally:
            depth[vmid] = 0
            handle.close()

    def _acquire(self, path: Path):
        try:
            os.mkdir(path.parent)
        except FileExistsError:
            pass
        handle = open(path, "a")
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.close()
                    raise LockTimeout(f"can't lock file '{path}' - got timeout") from None
                time.sleep(0.02)
