"""The lab's pmxcfs (lab/pmxcfs.py): its FUSE handlers called as the kernel calls them, over a
backing directory (no mount needed). Cases from pve-cluster src/pmxcfs/ (7091d92e): pmxcfs.c
cfs_fuse_getattr / cfs_fuse_chmod / cfs_fuse_chown, cfs-utils.c path_is_private, memdb.c
memdb_pwrite (EFBIG beyond MEMDB_MAX_FILE_SIZE, EEXIST on create, '.'/'..' EACCES) and
memdb_rename (vmlist), the absent link/symlink/mknod ops. tests/lab/test_pve_node.py checks the
same rules through the kernel on pve1's /etc/pve."""

import doctest
import errno
import os
import stat
import struct

import pytest

from lab import pmxcfs
from lab.pve import pmxcfs as rules

GID = 33  # www-data on Debian
LOOKUP, GETATTR, SETATTR, SYMLINK, MKNOD, UNLINK, RENAME, LINK, WRITE, READDIR, CREATE, OPENDIR = (
    1, 3, 4, 6, 8, 10, 12, 13, 16, 28, 35, 27,
)  # fmt: skip


@pytest.fixture
def fs(tmp_path):
    rules.make_layout(tmp_path, "pve1")
    (tmp_path / "nodes/pve1/lxc/129.conf").write_text("arch: amd64\n")
    (tmp_path / "priv/authkey.key").write_text("secret")
    os.chmod(tmp_path / "nodes/pve1/lxc/129.conf", 0o600)  # what the backing file has does not matter
    return pmxcfs.Pmxcfs(str(tmp_path), GID)


def lookup(fs, path: str) -> int:
    nodeid = 1
    for name in path.split("/"):
        code, reply = fs.handle(LOOKUP, nodeid, name.encode() + b"\0")
        assert code == 0, (path, name, code)
        nodeid = struct.unpack_from("<Q", reply)[0]
    return nodeid


def attr(fs, path: str) -> tuple[int, int, int, int]:
    """(mode, uid, gid, size) as GETATTR answers."""
    code, reply = fs.handle(GETATTR, lookup(fs, path), struct.pack("<IIQ", 0, 0, 0))
    assert code == 0
    fields = pmxcfs.ATTR.unpack_from(reply, 16)
    return fields[9], fields[11], fields[12], fields[1]


def setattr(fs, path: str, valid: int, mode=0, uid=0, gid=0, size=0) -> int:
    body = pmxcfs.SETATTR_IN.pack(valid, 0, 0, size, 0, 0, 0, 0, 0, 0, 0, mode, 0, uid, gid, 0)
    return fs.handle(SETATTR, lookup(fs, path), body)[0]


def write(fs, path: str, offset: int, data: bytes) -> int:
    body = struct.pack("<QQIIQII", 0, offset, len(data), 0, 0, 0, 0) + data
    return fs.handle(WRITE, lookup(fs, path), body)[0]


def test_owner_and_modes_are_pmxcfss_whatever_the_backing_files_say(fs):
    assert attr(fs, "nodes/pve1/lxc/129.conf")[:3] == (stat.S_IFREG | 0o640, 0, GID)
    assert attr(fs, "nodes/pve1/lxc")[:3] == (stat.S_IFDIR | 0o755, 0, GID)
    assert attr(fs, "lxc")[:3] == (stat.S_IFLNK | 0o755, 0, GID)
    assert attr(fs, "priv/authkey.key")[0] == stat.S_IFREG | 0o600
    assert attr(fs, "priv")[0] == stat.S_IFDIR | 0o700
    assert attr(fs, "nodes/pve1/priv")[0] == stat.S_IFDIR | 0o700


def test_chmod_only_to_pmxcfss_own_mode_and_chown_only_to_root_www_data(fs):
    conf = "nodes/pve1/lxc/129.conf"
    assert setattr(fs, conf, pmxcfs.FATTR_MODE, mode=stat.S_IFREG | 0o640) == 0
    assert setattr(fs, conf, pmxcfs.FATTR_MODE, mode=stat.S_IFREG | 0o644) == -errno.EPERM
    assert setattr(fs, "priv/authkey.key", pmxcfs.FATTR_MODE, mode=0o600) == 0
    assert setattr(fs, "priv/authkey.key", pmxcfs.FATTR_MODE, mode=0o640) == -errno.EPERM
    assert setattr(fs, conf, pmxcfs.FATTR_UID | pmxcfs.FATTR_GID, uid=0, gid=GID) == 0
    assert setattr(fs, conf, pmxcfs.FATTR_UID, uid=0) == 0  # gid -1: no change
    assert setattr(fs, conf, pmxcfs.FATTR_UID, uid=1000) == -errno.EPERM
    assert setattr(fs, conf, pmxcfs.FATTR_GID, gid=0) == -errno.EPERM
    assert attr(fs, conf)[:3] == (stat.S_IFREG | 0o640, 0, GID)


def test_a_file_may_not_grow_beyond_one_mib(fs):
    conf = "nodes/pve1/lxc/129.conf"
    assert write(fs, conf, rules.MAX_FILE_SIZE - 1, b"x") == 0
    assert write(fs, conf, rules.MAX_FILE_SIZE, b"x") == -errno.EFBIG
    assert setattr(fs, conf, pmxcfs.FATTR_SIZE, size=rules.MAX_FILE_SIZE + 1) == -errno.EFBIG
    assert attr(fs, conf)[3] == rules.MAX_FILE_SIZE


def test_create_refuses_dot_names_and_a_vmid_another_guest_has(fs, tmp_path):
    lxc = lookup(fs, "nodes/pve1/lxc")
    create = struct.pack("<IIII", os.O_WRONLY, 0o644, 0o022, 0)
    assert fs.handle(CREATE, lxc, create + b"..\0")[0] == -errno.EACCES
    assert fs.handle(CREATE, lxc, create + b"129.conf\0")[0] == -errno.EEXIST
    (tmp_path / "nodes/pve1/qemu-server/130.conf").write_text("")
    assert fs.handle(CREATE, lxc, create + b"130.conf\0")[0] == -errno.EEXIST  # VM 130 is a qemu guest
    code, _ = fs.handle(CREATE, lxc, create + b"129.conf.tmp.77\0")
    assert code == 0 and attr(fs, "nodes/pve1/lxc/129.conf.tmp.77")[0] == stat.S_IFREG | 0o640


def test_rename_over_the_config_is_allowed_and_moves_the_node(fs, tmp_path):
    lxc = lookup(fs, "nodes/pve1/lxc")
    fs.handle(CREATE, lxc, struct.pack("<IIII", os.O_WRONLY, 0o644, 0, 0) + b"129.conf.tmp.77\0")
    temp = lookup(fs, "nodes/pve1/lxc/129.conf.tmp.77")
    assert fs.handle(RENAME, lxc, struct.pack("<Q", lxc) + b"129.conf.tmp.77\x00129.conf\x00")[0] == 0
    assert fs.paths[temp] == "nodes/pve1/lxc/129.conf"
    assert sorted(os.listdir(tmp_path / "nodes/pve1/lxc")) == ["129.conf"]
    (tmp_path / "nodes/pve1/qemu-server/131.conf").write_text("")
    (tmp_path / "nodes/pve1/lxc/x").write_text("")
    assert fs.handle(RENAME, lxc, struct.pack("<Q", lxc) + b"x\x00131.conf\x00")[0] == -errno.EEXIST


def test_no_hard_links_symlinks_or_device_nodes(fs):
    lxc = lookup(fs, "nodes/pve1/lxc")
    for opcode in (LINK, SYMLINK, MKNOD):
        assert fs.handle(opcode, lxc, b"\0" * 16 + b"x\0")[0] == -errno.ENOSYS


def test_readdir_lists_the_backing_directory(fs):
    code, reply = fs.handle(OPENDIR, 1, struct.pack("<II", 0, 0))
    handle = struct.unpack_from("<Q", reply)[0]
    code, listing = fs.handle(READDIR, 1, struct.pack("<QQII", handle, 0, 4096, 0))
    names, offset = [], 0
    while offset < len(listing):
        namelen = struct.unpack_from("<I", listing, offset + 16)[0]
        names.append(listing[offset + 24 : offset + 24 + namelen].decode())
        offset += (24 + namelen + 7) // 8 * 8
    assert names == [".", "..", "local", "lxc", "nodes", "openvz", "priv", "qemu-server"]


def test_doctests_of_the_rules():
    assert doctest.testmod(rules).failed == 0
