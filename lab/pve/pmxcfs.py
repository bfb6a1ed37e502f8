"""What the emulator and the lab need of /etc/pve as pmxcfs (pve-cluster src/pmxcfs/) presents it.

- the layout: ``nodes/<node>/{lxc,qemu-server,openvz,priv}`` and, at the top, the links pmxcfs
  makes for the local node: ``local -> nodes/<node>``, ``lxc -> nodes/<node>/lxc``,
  ``qemu-server -> nodes/<node>/qemu-server``, ``openvz -> nodes/<node>/openvz`` (pmxcfs.c main,
  cfs_plug_link_new); ``priv/`` at the top;
- writes as PVE's writers make them: a ``<path>.tmp.<pid>`` file created O_EXCL, written and
  renamed over the file (pve-common src/PVE/File.pm file_set_contents, called by pve-cluster
  src/PVE/Cluster.pm cfs_write_file); nothing is chmod'ed (pmxcfs decides the mode itself).

>>> import tempfile; root = Path(tempfile.mkdtemp())
>>> make_layout(root, "pve1")
>>> sorted(p.name for p in root.iterdir()), os.readlink(root / "lxc")
(['local', 'lxc', 'nodes', 'openvz', 'priv', 'qemu-server'], 'nodes/pve1/lxc')
>>> file_set_contents(root / "lxc" / "129.conf", b"arch: amd64\\n")
>>> sorted(p.name for p in (root / "nodes/pve1/lxc").iterdir())
['129.conf']
"""

import os
from pathlib import Path

# pmxcfs.c main: the local node's links (openvz: "FIXME: remove openvz stuff for 7.x", still made)
LINKS = ("lxc", "qemu-server", "openvz")


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
    """PVE::File::file_set_contents: the temp file beside the target, one rename."""
    temp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.rename(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise
