#!/usr/bin/python3
"""pmxcfs for the lab node pve1: /etc/pve as a FUSE filesystem with pmxcfs's rules, over a plain
backing directory (the lab's NODE_DIR/etc-pve, bound at /var/lib/pve-cluster/etc-pve).

Installed as /usr/bin/pmxcfs in pve1 and run by pve-cluster.service; python3 stdlib only (the
node's rootfs has no libfuse): it speaks the kernel's FUSE protocol on /dev/fuse itself
(linux include/uapi/linux/fuse.h) and mounts with pmxcfs's options (pmxcfs.c main: "-odefault_permissions",
"-oallow_other"). What it follows, from pve-cluster src/pmxcfs/ (read at 7091d92e):

- getattr (pmxcfs.c cfs_fuse_getattr, cfs-plug-memdb.c tree_entry_stat): owner 0, group www-data,
  files 0666 & 0750 = 0640, directories and links 0777 & 0755, both & 0700 under priv/ and
  nodes/<node>/priv/ (cfs-utils.c path_is_private);
- chmod (cfs_fuse_chmod): only to 0600 (private) or 0640 (elsewhere), as a no-op; else EPERM;
- chown (cfs_fuse_chown): only to uid 0 / -1 and gid www-data / -1, as a no-op; else EPERM;
- write and truncate beyond 1 MiB: EFBIG (memdb.h MEMDB_MAX_FILE_SIZE, memdb.c memdb_pwrite);
- create of an existing name: EEXIST (memdb_pwrite with create); "." and "..": EACCES;
- a <vmid>.conf for a vmid another guest has (memdb.c path_contain_vm_config,
  vmlist_different_vm_exists): EEXIST, on create and on rename;
- rename (cfs_fuse_rename -> memdb_rename): within the filesystem, over an existing file;
- no link, symlink, mknod, xattr, lock ops (absent from fuse_ops): ENOSYS (flock stays local,
  as on a node); the links local, lxc, qemu-server, openvz (pmxcfs.c main, cfs_plug_link_new)
  are the backing directory's own symlinks.

Not emulated: the cluster (dfsm, corosync, quorum: a single node, always quorate), the .version,
.members, .vmlist, .clusterlog and .rrd plugins, memdb's 128 MiB / 256k-inode limits, and its
directory-based cluster locks (priv/lock/).

    pmxcfs /var/lib/pve-cluster/etc-pve /etc/pve     # in the foreground; SIGTERM unmounts
"""

import ctypes
import errno
import grp
import os
import signal
import socket
import stat
import struct
import sys

sys.path.insert(0, "/usr/share/pve-lab/pve-emulator.pyz")  # the emulator, for pmxcfs's constants

try:
    from pve.pmxcfs import MAX_FILE_SIZE, is_private, vm_config_conflict
except ImportError:  # run from the source tree (tests)
    from lab.pve.pmxcfs import MAX_FILE_SIZE, is_private, vm_config_conflict

# linux include/uapi/linux/fuse.h
IN_HEADER = struct.Struct("<IIQQIIIHH")  # len opcode unique nodeid uid gid pid total_extlen padding
OUT_HEADER = struct.Struct("<IiQ")  # len error unique
# fuse_attr: ino size blocks atime mtime ctime, *nsec mode nlink uid gid rdev blksize flags
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")
FATTR_MODE, FATTR_UID, FATTR_GID, FATTR_SIZE, FATTR_ATIME, FATTR_MTIME = 1, 2, 4, 8, 16, 32
FATTR_ATIME_NOW, FATTR_MTIME_NOW = 128, 256
FOPEN_DIRECT_IO = 1  # cfs_fuse_open: fi->direct_io = 1
FUSE_BIG_WRITES = 1 << 5
OPS = {
    1: "lookup", 2: "forget", 3: "getattr", 4: "setattr", 5: "readlink", 9: "mkdir", 10: "unlink",
    11: "rmdir", 12: "rename", 14: "open", 15: "read", 16: "write", 17: "statfs", 18: "release",
    20: "fsync", 25: "flush", 26: "init", 27: "opendir", 28: "readdir", 29: "releasedir", 30: "fsyncdir",
    35: "create", 36: "interrupt", 38: "destroy", 42: "batch_forget",
}  # fmt: skip
NO_REPLY = {"forget", "batch_forget", "interrupt"}
MAX_WRITE = 128 * 1024


class FuseError(Exception):
    def __init__(self, code: int):
        self.code = code


def _name(body: bytes) -> str:
    name = body.split(b"\0", 1)[0].decode()
    if name in ("", ".", ".."):
        raise FuseError(errno.EACCES)  # memdb_pwrite: do not allow '.' and '..'
    return name


class Pmxcfs:
    """The request handlers: ``handle(header fields, body) -> reply bytes or None``."""

    def __init__(self, backing: str, gid: int):
        self.backing = os.path.realpath(backing)
        self.gid = gid
        self.paths = {1: ""}  # nodeid -> path relative to the backing dir
        self.nodeids = {"": 1}
        self.dirs: dict[int, list] = {}
        self.next_handle = 1
        self.next_nodeid = 2

    # -- nodes --------------------------------------------------------------------------------
    def rel(self, nodeid: int) -> str:
        try:
            return self.paths[nodeid]
        except KeyError:
            raise FuseError(errno.ENOENT) from None

    def real(self, rel: str) -> str:
        return os.path.join(self.backing, rel) if rel else self.backing

    def nodeid(self, rel: str) -> int:
        if rel not in self.nodeids:
            new, self.next_nodeid = self.next_nodeid, self.next_nodeid + 1
            self.paths[new], self.nodeids[rel] = rel, new
        return self.nodeids[rel]

    def attr(self, rel: str) -> bytes:
        """cfs_fuse_getattr over tree_entry_stat."""
        st = os.lstat(self.real(rel))
        if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            mode, nlink = stat.S_IFMT(st.st_mode) | 0o777, 2 if stat.S_ISDIR(st.st_mode) else 1
            mode &= 0o777700 if is_private(rel) else 0o777755
        else:
            mode, nlink = stat.S_IFREG | (0o666 & (0o700 if is_private(rel) else 0o750)), 1
        mtime = int(st.st_mtime)  # memdb keeps seconds
        blocks = (st.st_size + 4095) // 4096 * 8
        return ATTR.pack(
            self.nodeid(rel), st.st_size, blocks, mtime, mtime, mtime, 0, 0, 0, mode, nlink, 0, self.gid, 0, 4096, 0
        )

    def entry(self, rel: str) -> bytes:
        return struct.pack("<QQQQII", self.nodeid(rel), 0, 0, 0, 0, 0) + self.attr(rel)

    def child(self, nodeid: int, body: bytes) -> str:
        parent = self.rel(nodeid)
        name = _name(body)
        return f"{parent}/{name}" if parent else name

    # -- handlers -----------------------------------------------------------------------------
    def init(self, nodeid, body):
        major, minor, readahead = struct.unpack_from("<III", body)
        if major != 7:
            raise FuseError(errno.EPROTO)
        flags = FUSE_BIG_WRITES  # pmxcfs.c main: -obig_writes
        return struct.pack("<IIIIHHIIHHI28x", 7, min(minor, 31), readahead, flags, 16, 12, MAX_WRITE, 1, 0, 0, 0)

    def lookup(self, nodeid, body):
        rel = self.child(nodeid, body)
        if not os.path.lexists(self.real(rel)):
            raise FuseError(errno.ENOENT)
        return self.entry(rel)

    def forget(self, nodeid, body):
        return None

    batch_forget = interrupt = forget

    def getattr(self, nodeid, body):
        return struct.pack("<QII", 0, 0, 0) + self.attr(self.rel(nodeid))

    def setattr(self, nodeid, body):
        valid, _, _, size, _, _, mtime, _, _, _, _, mode, _, uid, gid, _ = SETATTR_IN.unpack_from(body)
        rel = self.rel(nodeid)
        if valid & FATTR_MODE:  # cfs_fuse_chmod
            allowed = 0o600 if is_private(rel) else 0o640
            if mode & 0o7777 != allowed:
                raise FuseError(errno.EPERM)
        if valid & (FATTR_UID | FATTR_GID):  # cfs_fuse_chown (-1, "no change": the bit is off)
            if (valid & FATTR_UID and uid != 0) or (valid & FATTR_GID and gid != self.gid):
                raise FuseError(errno.EPERM)
        if valid & FATTR_SIZE:  # cfs_fuse_truncate -> memdb_pwrite(offset=size)
            if size > MAX_FILE_SIZE:
                raise FuseError(errno.EFBIG)
            os.truncate(self.real(rel), size)
        if valid & (FATTR_MTIME | FATTR_MTIME_NOW):  # cfs_fuse_utimens: mtime only
            when = None if valid & FATTR_MTIME_NOW else (mtime, mtime)
            os.utime(self.real(rel), times=when, follow_symlinks=False)
        return self.getattr(nodeid, b"")

    def readlink(self, nodeid, body):
        return os.readlink(self.real(self.rel(nodeid))).encode()

    def mkdir(self, nodeid, body):
        rel = self.child(nodeid, body[8:])
        os.mkdir(self.real(rel))
        return self.entry(rel)

    def unlink(self, nodeid, body):
        rel = self.child(nodeid, body)
        if os.path.isdir(self.real(rel)) and not os.path.islink(self.real(rel)):
            raise FuseError(errno.EISDIR)
        os.unlink(self.real(rel))
        self._gone(rel)

    def rmdir(self, nodeid, body):
        rel = self.child(nodeid, body)
        os.rmdir(self.real(rel))
        self._gone(rel)

    def rename(self, nodeid, body):
        (newdir,) = struct.unpack_from("<Q", body)
        old, new = body[8:].split(b"\0")[:2]
        source, target = self.child(nodeid, old + b"\0"), self.child(newdir, new + b"\0")
        if os.path.isfile(self.real(source)) and vm_config_conflict(self.backing, target, source):
            raise FuseError(errno.EEXIST)
        os.rename(self.real(source), self.real(target))
        self._gone(target)
        for rel in [r for r in self.nodeids if r == source or r.startswith(source + "/")]:
            moved = target + rel[len(source) :]
            nid = self.nodeids.pop(rel)
            self.paths[nid], self.nodeids[moved] = moved, nid

    def _gone(self, rel: str) -> None:
        nid = self.nodeids.pop(rel, None)
        if nid is not None:
            self.paths.pop(nid, None)

    def open(self, nodeid, body):
        self.rel(nodeid)
        return struct.pack("<QII", 0, FOPEN_DIRECT_IO, 0)

    def read(self, nodeid, body):
        _, offset, size = struct.unpack_from("<QQI", body)
        with open(self.real(self.rel(nodeid)), "rb") as handle:
            handle.seek(offset)
            return handle.read(size)

    def write(self, nodeid, body):
        _, offset, size = struct.unpack_from("<QQI", body)
        if offset + size > MAX_FILE_SIZE:
            raise FuseError(errno.EFBIG)
        fd = os.open(self.real(self.rel(nodeid)), os.O_WRONLY)
        try:
            written = os.pwrite(fd, body[40 : 40 + size], offset)
        finally:
            os.close(fd)
        return struct.pack("<II", written, 0)

    def create(self, nodeid, body):
        rel = self.child(nodeid, body[16:])
        if vm_config_conflict(self.backing, rel):
            raise FuseError(errno.EEXIST)
        os.close(os.open(self.real(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
        return self.entry(rel) + struct.pack("<QII", 0, FOPEN_DIRECT_IO, 0)

    def statfs(self, nodeid, body):
        st = os.statvfs(self.backing)
        counts = (st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree)
        return struct.pack("<QQQQQIIII24x", *counts, 4096, 255, 4096, 0)

    def release(self, nodeid, body):
        return b""

    fsync = flush = releasedir = fsyncdir = release

    def opendir(self, nodeid, body):
        rel = self.rel(nodeid)
        names = [".", "..", *sorted(os.listdir(self.real(rel)))]
        handle, self.next_handle = self.next_handle, self.next_handle + 1
        self.dirs[handle] = names
        return struct.pack("<QII", handle, 0, 0)

    def readdir(self, nodeid, body):
        handle, offset, size = struct.unpack_from("<QQI", body)
        out = b""
        for index, name in enumerate(self.dirs.get(handle, [])[offset:], start=offset + 1):
            raw = name.encode()
            record = struct.pack("<QQII", 1, index, len(raw), 0) + raw
            record += b"\0" * (-len(record) % 8)
            if len(out) + len(record) > size:
                break
            out += record
        return out

    def destroy(self, nodeid, body):
        raise SystemExit(0)

    def handle(self, opcode: int, nodeid: int, body: bytes) -> tuple[int, bytes | None]:
        """(negative errno or 0, reply body; None: no reply at all)."""
        name = OPS.get(opcode)
        if name is None:  # link, symlink, mknod, xattrs, locks, ...: not in pmxcfs's fuse_ops
            return -errno.ENOSYS, b""
        if name == "releasedir":
            self.dirs.pop(struct.unpack_from("<Q", body)[0], None)
        try:
            reply = getattr(self, name)(nodeid, body)
        except FuseError as error:
            return -error.code, b""
        except OSError as error:
            return -(error.errno or errno.EIO), b""
        if name in NO_REPLY:
            return 0, None
        return 0, reply or b""


def mount(target: str) -> int:
    """mount(2) of a fuse filesystem at ``target`` with pmxcfs's options; the /dev/fuse fd."""
    fd = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other"
    libc = ctypes.CDLL(None, use_errno=True)
    ms_nosuid, ms_nodev = 2, 4
    if libc.mount(b"/dev/fuse", target.encode(), b"fuse", ms_nosuid | ms_nodev, options.encode()) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {target}: {os.strerror(code)}")
    return fd


def unmount(target: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(target.encode(), 2)  # MNT_DETACH


def notify_ready() -> None:
    """sd_notify READY=1 (systemd Type=notify), once mounted."""
    address = os.environ.get("NOTIFY_SOCKET")
    if address:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect("\0" + address[1:] if address.startswith("@") else address)
            sock.send(b"READY=1")


def serve(fs: Pmxcfs, fd: int) -> None:
    while True:
        try:
            request = os.read(fd, MAX_WRITE + 4096)
        except OSError as error:
            if error.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):  # ENOENT: an interrupted request
                continue
            if error.errno == errno.ENODEV:  # unmounted
                return
            raise
        _, opcode, unique, nodeid, *_ = IN_HEADER.unpack_from(request)
        code, reply = fs.handle(opcode, nodeid, request[IN_HEADER.size :])
        if reply is None:
            continue
        try:
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(reply), code, unique) + reply)
        except OSError as error:
            if error.errno != errno.ENOENT:  # the request was interrupted meanwhile
                raise


def main(argv: list[str]) -> None:
    backing, target = argv
    unmount(target)  # left by a crashed instance (ENOTCONN); nothing there: EINVAL, ignored
    os.makedirs(target, exist_ok=True)
    fs = Pmxcfs(backing, grp.getgrnam("www-data").gr_gid)  # pmxcfs.c main: getgrnam("www-data")
    fd = mount(target)
    signal.signal(signal.SIGTERM, lambda *_: (unmount(target), sys.exit(0)))
    notify_ready()
    try:
        serve(fs, fd)
    finally:
        unmount(target)


if __name__ == "__main__":
    main(sys.argv[1:])
