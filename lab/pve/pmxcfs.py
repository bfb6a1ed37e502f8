"""What the emulator and the lab need of /etc/pve as pmxcfs (pve-cluster src/pmxcfs/, read at
7091d92e) presents it, on a plain directory.

- the layout: ``nodes/<node>/{lxc,qemu-server,openvz,priv}`` and, at the top, the links pmxcfs
  makes for the local node: ``local -> nodes/<node>``, ``lxc -> nodes/<node>/lxc``,
  ``qemu-server -> nodes/<node>/qemu-server``, ``openvz -> nodes/<node>/openvz`` (pmxcfs.c main,
  cfs_plug_link_new); ``priv/`` at the top;
- writes as PVE's writers make them: a ``<path>.tmp.<pid>`` file created O_EXCL, written and
  renamed over the file (pve-common src/PVE/File.pm file_set_contents, called by pve-cluster
  src/PVE/Cluster.pm cfs_write_file); nothing is chmod'ed (pmxcfs decides the mode itself);
- files over 1 MiB are refused with EFBIG (memdb.h MEMDB_MAX_FILE_SIZE, memdb.c memdb_pwrite);
- which paths are private (cfs-utils.c path_is_private) and when a guest config's vmid is taken
  (memdb.c path_contain_vm_config, status.c vmlist_different_vm_exists).

The lab node serves /etc/pve through lab/pmxcfs.py (FUSE, with these rules and pmxcfs's owners,
modes, chmod/chown refusals); the emulator in unit tests writes a plain directory laid out here.

>>> import tempfile; root = Path(tempfile.mkdtemp())
>>> make_layout(root, "pve1")
>>> sorted(p.name for p in root.iterdir()), os.readlink(root / "lxc")
(['local', 'lxc', 'nodes', 'openvz', 'priv', 'qemu-server'], 'nodes/pve1/lxc')
>>> file_set_contents(root / "lxc" / "129.conf", b"arch: amd64\\n")
>>> sorted(p.name for p in (root / "nodes/pve1/lxc").iterdir())
['129.conf']
>>> file_set_contents(root / "lxc" / "130.conf", b"x" * (MAX_FILE_SIZE + 1))  # doctest: +ELLIPSIS
Traceback (most recent call last):
OSError: [Errno 27] File too large: '130.conf.tmp...'
"""

import errno
import os
import re
from pathlib import Path

# pmxcfs.c main: the local node's links (openvz: "FIXME: remove openvz stuff for 7.x", still made)
LINKS = ("lxc", "qemu-server", "openvz")
MAX_FILE_SIZE = 1024 * 1024  # memdb.h MEMDB_MAX_FILE_SIZE
_PRIVATE = re.compile(r"^(priv|nodes/[^/]+/priv)(/|$)")  # cfs-utils.c path_is_private


def is_private(relative: str) -> bool:
    """cfs-utils.c path_is_private: priv/ and nodes/<node>/priv/.

    >>> [is_private(p) for p in ("priv", "priv/authkey.key", "nodes/pve1/priv/x", "privx", "nodes/pve1/lxc")]
    [True, True, True, False, False]
    """
    return bool(_PRIVATE.match(relative.lstrip("/")))


_VM_CONFIG = re.compile(r"^nodes/([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)/(qemu-server|lxc|openvz)/([1-9]\d*)\.conf$")


def vm_config_conflict(root, relative: str, moved_from: str | None = None) -> bool:
    """memdb.c path_contain_vm_config + status.c vmlist_different_vm_exists: ``relative`` is a
    guest config whose vmid another guest (other node or type) already has; a rename of that
    guest's own config (``moved_from``, a migration) does not count.

    >>> import tempfile; root = Path(tempfile.mkdtemp()); make_layout(root, "pve1")
    >>> _ = (root / "nodes/pve1/qemu-server/129.conf").write_text("")
    >>> [vm_config_conflict(root, p) for p in ("nodes/pve1/lxc/129.conf", "nodes/pve1/qemu-server/129.conf",
    ...                                         "nodes/pve1/lxc/130.conf", "nodes/pve1/lxc/129.conf.tmp.7")]
    [True, False, False, False]
    """
    m = _VM_CONFIG.match(relative)
    if not m:
        return False
    source = _VM_CONFIG.match(moved_from or "")
    if source and source[3] == m[3]:
        return False
    others = Path(root).glob(f"nodes/*/*/{m[3]}.conf")
    return any(_VM_CONFIG.match(str(o.relative_to(root))) and str(o.relative_to(root)) != relative for o in others)


def make_layout(root, node: str) -> None:
    """The directories and links of a one-node cluster's /etc/pve; what is there is kept."""
    root = Path(root)
    for sub in (*LINKS, "priv"):
        (root / "nodes" / node / sub).mkdir(parents=True, exist_ok=True)
    (root / "priv").mkdir(mode=0o700, exist_ok=True)
    for name, target in (("local", f"nodes/{node}"), *((link, f"nodes/{node}/{link}") for link in LINKS)):
        if not (root / name).is_symlink():
            (root / name).symlink_to(target)


def file_set_contents(path, data: bytes) -> None:
    """PVE::File::file_set_contents: the temp file beside the target, one rename; over 1 MiB,
    pmxcfs's EFBIG."""
    temp = f"{path}.tmp.{os.getpid()}"
    if len(data) > MAX_FILE_SIZE:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), Path(temp).name)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.rename(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise
