"""Apply the server unit's sandbox by hand, then exec a program: for a machine whose PID 1 is not
systemd (the device machine), so systemd-run cannot. Each step is what systemd does for the
property named (systemd/systemd src/core/execute.c exec_child, namespace.c, seccomp-util.c):

    python3 unit_sandbox.py CONFIG.json -- python3 child.py

CONFIG: {"uid": 65534, "gid": 65534, "syscalls": [numbers allowed], "errno": 1 | null (null: kill),
         "proc": true (ProtectProc=invisible, ProcSubset=pid), "loopback_only": true (IPAddressDeny=any,
         IPAddressAllow=localhost: a network namespace whose only interface is lo, up)}

Run as root. Order: namespaces and the fresh /proc first (they need root), then the identity,
NoNewPrivileges and an empty capability bounding set, then the seccomp filter last (after it,
only the allowed calls work), then execve (allowed: @system-service holds @process).
"""

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x4000, 1 << 18, 2, 4, 8
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 24, 22, 2
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000  # linux/sched.h (os.unshare is Python 3.12+)
# seccomp: struct seccomp_data {int nr; u32 arch; ...} (linux/seccomp.h); classic BPF opcodes (linux/filter.h)
LD_ABS_W, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
AUDIT_ARCH_X86_64, X32_SYSCALL_BIT = 0xC000003E, 0x40000000
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def private_proc() -> None:
    """ProtectProc=invisible + ProcSubset=pid: a private mount namespace with a fresh procfs."""
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _check(libc.mount(b"proc", b"/proc", b"proc", flags, b"hidepid=invisible,subset=pid"), "mount proc")


def loopback_only() -> None:
    """IPAddressDeny=any + IPAddressAllow=localhost: only the loopback is reachable."""
    _check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def drop_privileges(uid: int, gid: int) -> None:
    """User=, NoNewPrivileges=yes, CapabilityBoundingSet= (empty)."""
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the last capability: EINVAL, ignored
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def seccomp_program(allowed: list[int], errno: int | None) -> bytes:
    """SystemCallArchitectures=native (another ABI, x32 included: killed) + SystemCallFilter= (an
    allow list) + SystemCallErrorNumber= (errno for the rest; None: the process is killed)."""
    deny = RET_ERRNO | errno if errno is not None else RET_KILL_PROCESS

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    program = op(LD_ABS_W, 4) + op(JEQ_K, AUDIT_ARCH_X86_64, 1, 0) + op(RET_K, RET_KILL_PROCESS)
    program += op(LD_ABS_W, 0) + op(JGE_K, X32_SYSCALL_BIT, 0, 1) + op(RET_K, RET_KILL_PROCESS)
    for number in sorted(set(allowed)):  # each test jumps over its own ALLOW when not equal
        program += op(JEQ_K, number, 0, 1) + op(RET_K, RET_ALLOW)
    return program + op(RET_K, deny)


def load_seccomp(program: bytes) -> None:
    filters = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(filters))  # struct sock_fprog
    prog = ctypes.create_string_buffer(fprog, len(fprog))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0), "PR_SET_SECCOMP")


def main(argv: list[str]) -> None:
    config = json.loads(open(argv[1]).read())
    command = argv[argv.index("--") + 1 :]
    if config["proc"]:
        private_proc()
    if config["loopback_only"]:
        loopback_only()
    drop_privileges(config["uid"], config["gid"])
    load_seccomp(seccomp_program(config["syscalls"], config["errno"]))
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
