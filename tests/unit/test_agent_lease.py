"""The container's deploy lock (agent/lease.py) on real files, real flocks and real processes: a
holder keeps it across commands, a second run waits naming the first or refuses, and the lock goes
with the run's unlock, with its watched connection, or after the longest hold."""

import fcntl
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from sglang_pve.agent import cli, exitcodes, lease, procs
from sglang_pve.agent.release_store import Store
from tests.unit.agent_support import messages, messages_then

SAFETY_S = 60.0  # every holder of these tests ends by itself after this


@pytest.fixture
def connection():
    """A process standing for the controller's SSH connection: the holder ends when it does."""
    child = subprocess.Popen(["sleep", "300"])
    yield child
    child.kill()
    child.wait()


def flock_free(directory) -> bool:
    fd = os.open(os.path.join(directory, lease.LOCK), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def until(condition, seconds=20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def take(directory, token, watch, wait_s=0.0, owner="alice@laptop", task="deploy", say=None):
    say = say or messages()
    code = lease.acquire(str(directory), token, owner, task, wait_s, say, watch, SAFETY_S)
    return code, say.said


def flock_waiters(path) -> int:
    """Processes blocked in flock(2) on `path` now: /proc/locks lists each with "->" before it
    (proc(5), /proc/locks; fs/locks.c lock_get_status prints the device as %02x:%02x and the inode)."""
    st = os.stat(path)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks", encoding="ascii") as locks:
        return sum(1 for line in locks if " -> " in line and where in line.split())


def test_the_lock_outlives_the_command_and_a_second_run_refuses_naming_the_first(tmp_path, connection):
    watch = procs.identify(connection.pid)
    code, said = take(tmp_path, "aaa", watch)
    assert code == exitcodes.OK and f"while SSH connection PID {connection.pid} lives" in said[-1]
    assert not flock_free(tmp_path)  # the command returned; its holder keeps the flock
    record = lease.read(str(tmp_path))
    assert record["owner"] == "alice@laptop" and record["task"] == "deploy" and record["token"] == "aaa"
    assert lease.held(str(tmp_path), "aaa") and not lease.held(str(tmp_path), "bbb")

    code, said = take(tmp_path, "bbb", None, wait_s=0, owner="bob@desk")
    assert code == exitcodes.LOCKED
    assert f"held by alice@laptop (deploy) since {record['started']}, holder PID {record['holder']['pid']}" in said[-1]
    assert "not waiting (wait_lock=0)" in said[-1] and "--data wait_lock=SECONDS" in said[-1]
    code, said = take(tmp_path, "bbb", None, wait_s=0.3, owner="bob@desk")
    assert code == exitcodes.LOCKED and said[0].startswith("waiting up to 0.3s for the deploy lock")
    assert "still held after 0.3s" in said[-1]
    assert lease.read(str(tmp_path))["token"] == "aaa"  # the refused run wrote nothing

    assert take(tmp_path, "aaa", watch)[0] == exitcodes.OK  # the same run again: held already
    assert lease.release(str(tmp_path), "aaa") and flock_free(tmp_path)
    assert lease.read(str(tmp_path)) is None and not lease.release(str(tmp_path), "aaa")


def test_a_run_that_waits_gets_the_lock_when_the_first_ends(tmp_path, connection):
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    result, say = {}, messages()
    waiter = threading.Thread(target=lambda: result.update(got=take(tmp_path, "bbb", None, wait_s=SAFETY_S, say=say)))
    waiter.start()
    assert until(lambda: say.said)  # it found the lock held (under load, later than a fixed sleep)
    time.sleep(0.3)
    assert waiter.is_alive()  # still waiting
    lease.release(str(tmp_path), "aaa")
    waiter.join(SAFETY_S)
    code, said = result["got"]
    assert code == exitcodes.OK and "held by alice@laptop (deploy)" in said[0] and "got the deploy lock" in said[1]
    assert lease.read(str(tmp_path))["token"] == "bbb"
    lease.release(str(tmp_path), "bbb")


def test_the_lock_goes_when_the_controllers_connection_ends(tmp_path, connection):
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    connection.kill()
    connection.wait()
    assert until(lambda: flock_free(tmp_path))
    assert lease.read(str(tmp_path)) is None  # no stale lease left to confuse the next run
    assert take(tmp_path, "bbb", None)[0] == exitcodes.OK
    lease.release(str(tmp_path), "bbb")


def test_a_holder_ends_by_itself_after_the_longest_hold(tmp_path):
    os.makedirs(tmp_path, exist_ok=True)
    (tmp_path / lease.LEASE).write_text('{"token": "aaa"}')
    assert lease.hold(str(tmp_path), "aaa", None, max_hold_s=0.2, poll_s=0.05) == "held for 0.2s"
    assert lease.read(str(tmp_path)) is None
    (tmp_path / lease.LEASE).write_text('{"token": "other"}')
    assert lease.hold(str(tmp_path), "aaa", None, max_hold_s=5, poll_s=0.05) == "released"
    assert lease.read(str(tmp_path))["token"] == "other"  # another run's lease is never removed


def test_commands_of_the_run_proceed_under_its_lease_and_others_wait(tmp_path, connection):
    store = Store(str(tmp_path))
    with pytest.raises(lease.LeaseError, match="lease aaa.*held by nobody"):
        with store.locked("aaa"):
            pass
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    with store.locked("aaa"):  # the run's own apply: the holder has the flock, no deadlock
        assert store.ids() == []  # the lease is no release
    with pytest.raises(lease.LeaseError, match=r"held by alice@laptop \(deploy\)"):
        with store.locked("bbb"):
            pass
    entered = threading.Event()
    say = messages()

    def other():
        with store.locked(None, say):
            entered.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert until(lambda: say.said)  # said once it found the lock held: under load, later than a fixed sleep
    time.sleep(0.3)
    assert not entered.is_set() and "held by alice@laptop (deploy)" in say.said[0]  # a switch by hand waits
    lease.release(str(tmp_path), "aaa")
    thread.join(SAFETY_S)
    assert entered.is_set()


def test_the_cli_reports_for_the_fact_and_exits_nonzero_without_json(tmp_path, connection, capsys):
    base = ["--dir", str(tmp_path), "--owner", "alice@laptop", "--watch-pid", str(connection.pid)]
    base += ["--max-hold", str(SAFETY_S)]
    assert cli.main(["lock", "--token", "aaa", "--json", *base]) == exitcodes.OK
    assert '"held": true' in capsys.readouterr().out
    assert cli.main(["lock", "--token", "bbb", "--json", "--wait", "0", *base]) == exitcodes.OK
    assert '"held": false' in capsys.readouterr().out
    assert cli.main(["lock", "--token", "bbb", "--wait", "0", *base]) == exitcodes.LOCKED
    assert cli.main(["apply", "--dir", str(tmp_path), "--lease", "bbb", "--spec", "e30="]) == exitcodes.LOCKED
    assert "deploy lock" in capsys.readouterr().err
    assert cli.main(["unlock", "--dir", str(tmp_path), "--token", "aaa"]) == exitcodes.OK
    assert "released" in capsys.readouterr().out and flock_free(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["lock", "--token", "a b", *base])  # tokens are plain words: they reach a shell


def test_the_connection_is_the_nearest_sshd_ancestor(tmp_path, monkeypatch):
    """A fake /proc: this process's parent runs under an sshd-session (OpenSSH 9.8), under sshd."""
    chain = [
        (os.getppid(), 700, "/usr/bin/bash"),
        (700, 600, "/usr/lib/openssh/sshd-session"),
        (600, 1, "/usr/sbin/sshd"),
    ]
    for pid, parent, exe in chain:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (x y) S {parent} " + " ".join(["0"] * 17) + " 4242 0\n")
        os.symlink(exe, tmp_path / str(pid) / "exe")
    monkeypatch.setenv("SGLANG_PVE_PROC", str(tmp_path))
    assert lease.ssh_connection() == procs.Proc(700, 4242)
    os.unlink(tmp_path / "700" / "exe")
    os.symlink("/usr/bin/sudo", tmp_path / "700" / "exe")
    assert lease.ssh_connection() == procs.Proc(600, 4242)
    os.unlink(tmp_path / "600" / "exe")
    assert lease.ssh_connection() is None  # not under SSH: only unlock or the longest hold end it


def test_a_holder_whose_connection_ended_lets_go_only_after_its_runs_switch_ended(tmp_path, connection):
    """The controller died during the gate wait: its switch goes on here; the next run must find
    its outcome, not start its own beside it."""
    store = Store(str(tmp_path))
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    switching, done = threading.Event(), threading.Event()

    def orphaned_switch():
        with store.locked("aaa"):
            switching.set()
            done.wait(SAFETY_S)

    thread = threading.Thread(target=orphaned_switch)
    thread.start()
    assert switching.wait(SAFETY_S)
    connection.kill()
    connection.wait()
    # the holder saw the connection end: it waits for the switch lock (not a fixed time, which under
    # load can pass before the holder polled at all)
    assert until(lambda: flock_waiters(os.path.join(tmp_path, lease.SWITCH)) == 1, SAFETY_S)
    assert not flock_free(tmp_path) and lease.read(str(tmp_path))["token"] == "aaa"  # still held: the switch runs
    done.set()
    thread.join(SAFETY_S)
    assert until(lambda: flock_free(tmp_path)) and lease.read(str(tmp_path)) is None
    with store.locked(None):  # the next run goes ahead
        pass


def test_the_lock_command_returns_at_once_its_holder_keeps_no_output_of_it(tmp_path, connection):
    """pyinfra's command ends when its output ends: the holder must hold nothing of the command's
    stdin, stdout or stderr (else the SSH channel stays open as long as the lock)."""
    import sys

    directory = tmp_path / "fresh" / "releases"
    command = [sys.executable, "-m", "sglang_pve.agent", "lock", "--dir", str(directory), "--token", "aaa"]
    command += ["--owner", "alice@laptop", "--watch-pid", str(connection.pid), "--max-hold", str(SAFETY_S)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, _ = child.communicate(timeout=SAFETY_S)  # EOF on both pipes: no holder keeps them
    assert child.returncode == exitcodes.OK and b"held for alice@laptop" in out
    holder = lease.read(str(directory))["holder"]["pid"]
    assert [os.readlink(f"/proc/{holder}/fd/{fd}") for fd in (0, 1, 2)] == [os.devnull] * 3
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"  # root-only, made by the lock
    assert lease.release(str(directory), "aaa")


def _hold_switch_lock(directory):
    """Another process's switch: its own open file description of the switch lock, flocked."""
    fd = os.open(os.path.join(directory, lease.SWITCH), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_run_that_gets_the_lock_still_waits_for_a_switch_left_running(tmp_path, connection):
    """The holder of the run that started a switch died anyway (SIGKILL, max_hold_s): the deploy
    lock is free but the switch goes on in its unit; the next run writes nothing before it ended."""
    fd = _hold_switch_lock(tmp_path)
    watch = procs.identify(connection.pid)
    # the switch ends once this run was seen waiting for it (not at a fixed time: under load the
    # time can pass before the run looked, and the wait is never tested)
    say = messages_then("waiting for the switch an earlier run left running", lambda: os.close(fd))
    try:
        code, said = take(tmp_path, "bbb", watch, wait_s=0)
        assert code == exitcodes.LOCKED and "has not ended; not waiting (wait_lock=0)" in said[-1]
        assert lease.read(str(tmp_path)) is None and flock_free(tmp_path)  # refused: took nothing
        code, said = take(tmp_path, "bbb", watch, wait_s=SAFETY_S, say=say)
    finally:
        if not say.acted:
            os.close(fd)
    assert code == exitcodes.OK and any("waiting for the switch an earlier run left running" in s for s in said)
    assert lease.read(str(tmp_path))["token"] == "bbb"
    assert lease.release(str(tmp_path), "bbb")


def test_a_switch_checks_its_runs_lease_only_under_the_switch_lock(tmp_path, connection):
    """The holder removes a dead controller's lease under the switch lock, and a switch checks the
    lease under it: a switch that got there second refuses instead of running without its lock."""
    store = Store(str(tmp_path))
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    fd = _hold_switch_lock(tmp_path)  # the holder's side, as hold() does once the connection ended
    outcome, say = [], messages()

    def late_switch():
        try:
            with store.locked("aaa", say):
                outcome.append("ran")
        except lease.LeaseError as error:
            outcome.append(str(error))

    thread = threading.Thread(target=late_switch)
    thread.start()
    assert until(lambda: flock_waiters(os.path.join(tmp_path, lease.SWITCH)) == 1, SAFETY_S)  # blocked in it
    assert outcome == [] and say.said == ["waiting for the switch an earlier run left running to end"]
    os.unlink(os.path.join(tmp_path, lease.LEASE))  # the holder removes the lease, then lets go
    os.close(fd)
    thread.join(SAFETY_S)
    assert outcome and "this run's deploy lock" in outcome[0] and "is gone (lease aaa)" in outcome[0]


def test_giving_the_lock_back_marks_the_last_switch_outcome_seen(tmp_path, connection):
    from sglang_pve.agent import detached

    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    with detached.recorded(str(tmp_path), "sglang-pve-switch-1.service", "apply", "zzz", lambda: "r1") as done:
        done(exitcodes.OK)
    assert not detached.read(str(tmp_path)).get("seen")
    assert lease.release(str(tmp_path), "aaa")
    assert detached.read(str(tmp_path))["seen"] is True


def test_holder_names_the_run_that_holds_the_lock_and_writes_nothing(tmp_path, connection, capsys):
    """The read a --dry run makes instead of taking the lock (deploy/facts/lock.py DeployLockHolder)."""
    missing = tmp_path / "releases"
    assert cli.main(["holder", "--dir", str(missing)]) == exitcodes.OK
    assert json.loads(capsys.readouterr().out) is None and not missing.exists()  # free, and nothing created
    assert take(missing, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    before = {p.name: p.stat().st_mtime_ns for p in missing.iterdir()}
    assert cli.main(["holder", "--dir", str(missing)]) == exitcodes.OK
    holder = json.loads(capsys.readouterr().out)
    assert holder["token"] == "aaa" and holder["owner"] == "alice@laptop" and holder["holder"]["pid"] > 0
    assert {p.name: p.stat().st_mtime_ns for p in missing.iterdir()} == before and not flock_free(missing)
    assert lease.release(str(missing), "aaa")
    assert cli.main(["holder", "--dir", str(missing)]) == exitcodes.OK
    assert json.loads(capsys.readouterr().out) is None


def test_a_lock_command_whose_ssh_connection_is_gone_takes_nothing(tmp_path, monkeypatch, capsys):
    """A controller killed while `agent lock` started: its sshd is gone and the command was
    reparented to init. Holding then would watch nothing for lease.MAX_HOLD_S (seen in the lab's
    killed-anywhere test: every rerun waited on it)."""
    parent = tmp_path / "proc" / str(os.getppid())  # the shell that ran it, now a child of init
    parent.mkdir(parents=True)
    (parent / "stat").write_text(f"{os.getppid()} (bash) S 1 " + " ".join(["0"] * 17) + " 4242 0\n")
    os.symlink("/usr/bin/bash", parent / "exe")
    proc_root = parent.parent
    monkeypatch.setenv("SGLANG_PVE_PROC", str(proc_root))
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 50000 10.0.0.2 22")
    releases = tmp_path / "releases"
    args = ["lock", "--dir", str(releases), "--token", "aaa", "--owner", "alice@laptop", "--wait", "0", "--json"]
    assert cli.main(args) == exitcodes.OK
    answer = json.loads(capsys.readouterr().out)
    assert answer["held"] is False and "SSH connection this command came through is gone" in answer["message"]
    assert lease.read(str(releases)) is None  # no lease written, no holder left
    monkeypatch.delenv("SSH_CONNECTION")  # not under SSH (a local run): refused only when orphaned
    assert lease.connection_gone() == (os.getppid() == 1)


def test_giving_the_lock_back_wakes_the_holder_instead_of_waiting_for_its_poll(tmp_path, connection, monkeypatch):
    """unlock removes the lease and wakes the holder (WAKE through a pidfd): the flock is free when
    release returns, even with a holder that would look again only in an hour."""
    monkeypatch.setattr(lease, "POLL_S", 3600.0)  # the forked holder naps this long between looks
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    holder = lease.read(str(tmp_path))["holder"]
    assert lease.release(str(tmp_path), "aaa", wait_s=SAFETY_S)
    assert flock_free(tmp_path) and not procs.alive(procs.Proc(holder["pid"], holder["start"]))


def test_the_wake_reaches_no_process_but_the_holder_it_names(tmp_path):
    """A lease whose holder PID now belongs to another process (another start time) wakes nothing:
    SIGUSR1's default action would end that process."""
    other = subprocess.Popen(["sleep", "300"])
    try:
        start = procs.identify(other.pid).start
        lease._wake({"holder": {"pid": other.pid, "start": start + 1}})
        lease._wake({"holder": {"pid": "x"}})
        lease._wake({})
        time.sleep(0.2)
        assert other.poll() is None  # alive: not signalled
        lease._wake({"holder": {"pid": other.pid, "start": start}})  # the one it names: signalled
        assert other.wait(SAFETY_S) == -lease.WAKE
    finally:
        other.kill()
        other.wait()


def test_the_count_is_odd_while_the_lock_is_held_and_moves_on_with_every_taking(tmp_path, connection):
    directory = str(tmp_path)
    assert lease.count(directory) == 0  # never taken
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    assert lease.count(directory) == 1
    assert lease.release(directory, "aaa") and lease.count(directory) == 2  # the holder moved it before it let go
    with Store(directory).locked():  # an agent command's own take (a switch by hand)
        assert lease.count(directory) == 3
    assert lease.count(directory) == 4
    assert (tmp_path / lease.LOCK_COUNT).stat().st_mode & 0o777 == 0o600


def test_a_run_that_read_at_a_count_is_refused_once_the_lock_was_taken_since(tmp_path, connection):
    directory = str(tmp_path)
    watch = procs.identify(connection.pid)
    assert take(tmp_path, "aaa", watch)[0] == exitcodes.OK and lease.release(directory, "aaa")
    say = messages()
    code = lease.acquire(directory, "bbb", "bob@desk", "deploy", 0, say, watch, SAFETY_S, expect=0)
    assert code == exitcodes.LOCKED and "its count 0, now 2" in say.said[-1] and "Fix: run it again" in say.said[-1]
    assert lease.read(directory) is None and flock_free(tmp_path) and lease.count(directory) == 2  # nothing taken
    code = lease.acquire(directory, "bbb", "bob@desk", "deploy", 0, messages(), watch, SAFETY_S, expect=2)
    assert code == exitcodes.OK and lease.count(directory) == 3 and lease.held(directory, "bbb")
    lease.release(directory, "bbb")


def test_a_holder_killed_leaves_the_count_odd_and_the_next_taking_moves_it_to_odd_again(tmp_path, connection):
    directory = str(tmp_path)
    assert take(tmp_path, "aaa", procs.identify(connection.pid))[0] == exitcodes.OK
    os.kill(lease.read(directory)["holder"]["pid"], signal.SIGKILL)  # our child's holder, by its lease's PID
    assert until(lambda: flock_free(tmp_path))
    assert lease.count(directory) == 1  # a reader takes it for held: it reads again under the lock
    assert take(tmp_path, "bbb", None)[0] == exitcodes.OK and lease.count(directory) == 3
    lease.release(directory, "bbb")
    (tmp_path / lease.LOCK_COUNT).write_text("not a count\n")
    assert lease.count(directory) is None
