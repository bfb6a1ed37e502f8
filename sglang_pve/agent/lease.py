"""One deploy at a time per container: the lock a whole guest deploy holds across its commands.

A pyinfra run is many remote commands (file writes, the venv build, record, switch); a flock
dies with the command that took it. So `agent lock` takes the flock on the releases directory's
`.lock` (the one Store.locked takes) and hands it to a holder: a child in its own session that
keeps the descriptor open until one of

- `agent unlock --token T` (the run's last operation) removes the lease and wakes the holder
  (SIGUSR1 through a pidfd opened on the lease's PID and start time, so never another process),
  which then lets go at once instead of at its next poll;
- the controller's connection ends: the holder watches the sshd process the lock command ran
  under (the connection's own process, alive as long as the controller's session), so a killed
  controller frees the lock when its connection closes, without a stale lease; a switch that run
  started goes on without its controller (in its own unit: detached.py), and the holder lets go
  only once it ended (every record and switch holds `.switch.lock`), so the next run finds its
  outcome, not a switch midway;
- `max_hold_s` passed (a dead network link that sshd never notices cannot hold it for good).

The lease beside it (`.lease.json`, 0600) says who holds it, for the message of the run that waits:

    {"token": "3f9c...", "owner": "alice@laptop", "task": "deploy", "host": "sglang1",
     "started": "2026-12-01T14:50:03Z", "holder": {"pid": 4242, "start": 81234}}

The flock is the truth (the kernel frees it when the holder dies, however it dies); the lease
only describes it. Its count (contract.LOCK_COUNT) says whether it was taken since: whoever takes
the flock moves it to odd, and to even when it lets go (a holder that ends its hold normally, a
command's own take); one killed leaves it odd, which a later reader takes for held. A run that read
the container while the count was even and takes the lock only at its first change (`lock
--expect N`) is refused when the count is no longer N: what it read may have changed since.

Both sides take the switch lock before they touch the lease: a switch checks its run's lease
under it, a holder whose controller went away removes the lease under it, so a switch either runs
under its run's lock or refuses. A run that gets the deploy lock also waits for the switch lock: a
switch whose holder died anyway (max_hold_s, SIGKILL) still ends before the next run writes a
file. Commands of the run that holds it (apply, switch, transient) pass the token (`--lease T`)
and proceed after `check`; any other caller waits for the flock.
"""

import contextlib
import fcntl
import os
import signal
import socket
import time
from collections.abc import Iterator

from sglang_pve.agent import detached, exitcodes, procs, state
from sglang_pve.agent.contract import LOCK_COUNT
from sglang_pve.agent.output import Say
from sglang_pve.agent.state import Record

LOCK = ".lock"
SWITCH = ".switch.lock"  # held by every record and switch (locked)
LEASE = ".lease.json"  # hidden: release ids are the other *.json names (release_store.py)
POLL_S = 0.5
MAX_HOLD_S = 24 * 3600.0
UNLOCK_WAIT_S = 10.0
WAKE = signal.SIGUSR1  # unlock -> holder: the lease is gone, look now (blocked in the holder, never delivered)


class LeaseError(RuntimeError):
    """The lock is not held by the run that says it holds it; the message says who holds it."""


def _open(directory: str, name: str = LOCK) -> int:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def read(directory: str) -> Record | None:
    return state.read_json(os.path.join(directory, LEASE))


def count(directory: str) -> int | None:
    """The lock's count: 0 before its first taking, None when the file holds no count."""
    try:
        with open(os.path.join(directory, LOCK_COUNT), encoding="ascii") as handle:
            text = handle.read(32).strip()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _moved(directory: str, taken: bool) -> None:
    """Under the flock: the count moves on to odd (taken) or to even (let go)."""
    now = count(directory) or 0
    if taken:
        state.write_atomic(os.path.join(directory, LOCK_COUNT), f"{now + 1 + now % 2}\n", mode=0o600)
    elif now % 2:
        state.write_atomic(os.path.join(directory, LOCK_COUNT), f"{now + 1}\n", mode=0o600)


def describe(lease: Record | None) -> str:
    """Who holds the lock, for people: 'alice@laptop (deploy) since 2026-12-01T14:50:03Z, holder PID 4242'."""
    if not lease:
        return "an agent command of this host (no lease: a switch or transient run without a deploy)"
    holder = lease.get("holder") or {}
    return f"{lease.get('owner')} ({lease.get('task')}) since {lease.get('started')}" + (
        f", holder PID {holder.get('pid')} on {lease.get('host')}" if holder else ""
    )


def wait(fd: int, directory: str, wait_s: float, say: Say) -> bool:
    """Take the flock on `fd` within wait_s seconds, saying once who holds it; False when it stayed held."""
    if _try(fd):
        return True
    holder = describe(read(directory))
    if wait_s <= 0:
        return False
    say(f"waiting up to {wait_s:g}s for the deploy lock of {directory}, held by {holder}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        if _try(fd):
            say(f"got the deploy lock of {directory}")
            return True
    return False


def acquire(
    directory: str,
    token: str,
    owner: str,
    task: str,
    wait_s: float,
    say: Say,
    watch: procs.Proc | None,
    max_hold_s: float = MAX_HOLD_S,
    expect: int | None = None,
) -> int:
    """Take the lock for the run `token` and leave a holder keeping it; exit code. With `expect`,
    only while the count is still that one (the run read the container at it)."""
    current = read(directory)
    if current and current.get("token") == token and held(directory, token):
        say(f"the deploy lock of {directory} is held by this run already")
        return exitcodes.OK
    fd = _open(directory)
    try:
        deadline = time.monotonic() + wait_s
        got = wait(fd, directory, wait_s, say)
        if got and not _switch_idle(directory, deadline, say):
            say(
                f"a switch an earlier run left running in {directory} ({(detached.read(directory) or {}).get('unit')}) "
                + ("has not ended; not waiting (wait_lock=0)" if wait_s <= 0 else f"did not end within {wait_s:g}s")
                + ". Fix: rerun when it ended (journalctl -u that unit follows it)",
                error=True,
            )
            return exitcodes.LOCKED
        if not got:
            say(
                f"the deploy lock of {directory} is held by {describe(read(directory))}"
                + ("; not waiting (wait_lock=0)" if wait_s <= 0 else f"; still held after {wait_s:g}s")
                + ". Fix: rerun when that run ended, or wait longer with --data wait_lock=SECONDS (a run whose "
                "controller died frees it when its SSH connection closes)",
                error=True,
            )
            return exitcodes.LOCKED
        now = count(directory)
        if expect is not None and now != expect:
            say(
                f"the deploy lock of {directory} was taken since this run read the container (its count "
                f"{expect}, now {now}): another run or agent command may have changed what this run decided "
                "from. This run changed nothing under it. Fix: run it again",
                error=True,
            )
            return exitcodes.LOCKED
        _moved(directory, taken=True)
        lease: Record = {
            "token": token,
            "owner": owner,
            "task": task,
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        state.write_json(os.path.join(directory, LEASE), lease, mode=0o600)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {WAKE})  # the child is born with WAKE blocked
        child = os.fork()
        if child == 0:  # the holder: keeps `fd` (and with it the flock) open
            try:
                _detach()
                hold(directory, token, watch, max_hold_s)
            finally:
                os._exit(0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        holder = procs.identify(child)
        lease["holder"] = {"pid": child, "start": holder.start if holder else None}
        state.write_json(os.path.join(directory, LEASE), lease, mode=0o600)
        watched = f"while SSH connection PID {watch.pid} lives" if watch else f"at most {max_hold_s:g}s"
        say(f"deploy lock of {directory} held for {owner} ({task}) by PID {child}, {watched}")
        return exitcodes.OK
    finally:
        os.close(fd)  # the holder's copy keeps the lock


def _detach() -> None:
    """The holder leaves the command's session and output: the SSH channel ends with the command."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def hold(directory: str, token: str, watch: procs.Proc | None, max_hold_s: float, poll_s: float | None = None) -> str:
    """The holder's loop; returns why it ended (the lock goes with the process)."""
    poll_s = POLL_S if poll_s is None else poll_s
    deadline = time.monotonic() + max_hold_s
    while True:
        lease = read(directory)
        if not lease or lease.get("token") != token:
            _moved(directory, taken=False)
            return "released"
        if watch is not None and not procs.alive(watch):
            with _switch_lock(directory, wait=True):  # the switch that run started ends first
                state.remove(os.path.join(directory, LEASE))
                _moved(directory, taken=False)
            return "the controller's connection ended"
        if time.monotonic() >= deadline:  # a switch may still run: the count stays odd (held)
            state.remove(os.path.join(directory, LEASE))
            return f"held for {max_hold_s:g}s"
        signal.sigtimedwait({WAKE}, poll_s)  # a nap that unlock's WAKE ends early


def _wake(lease: Record) -> None:
    """Wake the lease's holder (ignored when it is gone). The pidfd pins the process before its
    start time is compared, so a PID reused since cannot receive the signal."""
    holder = lease.get("holder") or {}
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if procs.alive(procs.Proc(pid, holder.get("start"))):
            signal.pidfd_send_signal(fd, WAKE)
    except OSError:
        pass
    finally:
        os.close(fd)


def current(directory: str) -> Record | None:
    """The lease whose holder lives (None: the lock is free, or held without a lease)."""
    lease = read(directory)
    holder = (lease or {}).get("holder") or {}
    pid = holder.get("pid")
    if isinstance(pid, int) and procs.alive(procs.Proc(pid, holder.get("start"))):
        return lease
    return None


def held(directory: str, token: str) -> bool:
    """The lease names `token` and its holder lives (and so holds the flock)."""
    lease = current(directory)
    return lease is not None and lease.get("token") == token


def release(directory: str, token: str, wait_s: float = UNLOCK_WAIT_S) -> bool:
    """End the run's lease and wait until its holder let the flock go; False when the lease was
    not this run's (already ended: the connection closed, or never taken)."""
    lease = read(directory)
    if not lease or lease.get("token") != token:
        return False
    detached.mark_seen(directory)
    state.remove(os.path.join(directory, LEASE))
    _wake(lease)
    fd = _open(directory)
    try:
        deadline = time.monotonic() + wait_s
        while not _try(fd) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.close(fd)
    return True


@contextlib.contextmanager
def locked(directory: str, token: str | None, say: Say) -> Iterator[None]:
    """The body (a record, a switch) runs under the lock: the run `token`'s lease (checked, not
    taken again), or, without a token, the flock itself (waiting for whoever holds it, saying who).
    Either way it also holds the switch lock: a switch whose controller's connection ended runs on
    here (its holder let go of nothing yet, see hold), and whatever comes next waits for it."""
    if token is not None:
        with _switching(directory, say):  # then the lease: a holder removes it only under the switch lock
            if not held(directory, token):
                raise LeaseError(
                    f"this run's deploy lock of {directory} is gone (lease {token}); it is held by "
                    f"{describe(read(directory)) if read(directory) else 'nobody'}. Fix: run the task again"
                )
            yield
        return
    fd = _open(directory)
    try:
        wait(fd, directory, float("inf"), say)
        _moved(directory, taken=True)
        try:
            with _switching(directory, say):
                yield
        finally:
            _moved(directory, taken=False)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _switching(directory: str, say: Say) -> Iterator[None]:
    fd = _open(directory, SWITCH)
    try:
        if not _try(fd):
            say("waiting for the switch an earlier run left running to end")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _switch_lock(directory: str, wait: bool) -> Iterator[bool]:
    """The switch lock for the body (waiting for it, or not: then the body gets False while a switch runs)."""
    fd = _open(directory, SWITCH)
    try:
        if wait:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield wait or _try(fd)
    finally:
        os.close(fd)


def _switch_idle(directory: str, deadline: float, say: Say) -> bool:
    """With the deploy lock: no switch runs, or it ended before `deadline` (one whose run's holder
    died anyway goes on in its unit and must end before this run writes a file)."""
    said = False
    while True:
        with _switch_lock(directory, wait=False) as idle:
            if idle:
                return True
        if time.monotonic() >= deadline:
            return False
        if not said:
            running = detached.read(directory) or {}
            say(f"waiting for the switch an earlier run left running to end ({running.get('unit') or 'no unit'})")
            said = True
        time.sleep(POLL_S)


def ssh_connection() -> procs.Proc | None:
    """The sshd process of the connection this command came through (its nearest sshd
    ancestor: OpenSSH runs every channel of a connection under one process), or None."""
    pid = os.getppid()
    while pid > 1:
        if os.path.basename(procs.exe(pid)).startswith("sshd"):  # sshd, or OpenSSH 9.8's sshd-session
            return procs.identify(pid)
        pid = procs.parent(pid)
    return None


def connection_gone() -> bool:
    """The command's caller is gone: it was reparented to init (the controller's shell always
    waits for it), or it came through SSH (sshd sets SSH_CONNECTION in every session; sudo's
    env_reset drops it, hence the first test) and no sshd is left among its ancestors. Either way
    the connection closed while the command started (a controller killed then); a lock taken now
    would watch nothing and hold until MAX_HOLD_S, making every later run wait for it."""
    if ssh_connection() is not None:
        return False
    return os.getppid() == 1 or bool(os.environ.get("SSH_CONNECTION"))
