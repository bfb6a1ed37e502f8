"""The SSH edit of /etc/pve/nodes/<node>/lxc/<vmid>.conf: only the current section's own raw lines
change, every other line (description, snapshots, pending changes, foreign raw lines) stays; PVE's
config lock (a real flock on /run/lock/lxc/pve-config-<vmid>.lock, here in a temp dir) is held around
read, lock-key and digest checks, write and rename; the file is replaced in one rename."""

import doctest
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from sglang_pve.deploy.preflight import driver
from sglang_pve.provision import conffile, hostkeys, node_prep, snapshots

CONF = """\
#GPU server%3A SGLang
arch: amd64
cores: 64
dev0: /dev/nvidia0,mode=0666
lxc.apparmor.profile: unconfined
lxc.mount.entry: /tank/shared shared none bind,ro,create=dir 0 0
parent: sgpve-20261130-101010-config

[pve:pending]
cores: 96

[sgpve-20261130-101010-config]
arch: amd64
cores: 32
lxc.mount.entry: /tank/shared shared none bind,ro,create=dir 0 0
snaptime: 1796039192
"""


def test_doctests_of_the_provisioning_helpers():
    for module in (conffile, hostkeys, node_prep, driver, snapshots):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_only_the_current_sections_own_lines_change():
    new = conffile.edit(
        CONF,
        remove=["lxc.mount.entry: /tank/shared shared none bind,ro,create=dir 0 0"],
        add=[
            "lxc.mount.entry: /tank/shared shared none bind,create=dir 0 0",
            "lxc.mount.entry: /tank/data data none bind,ro,create=dir 0 0",
        ],
    )
    current, rest = new.split("\n[pve:pending]", 1)
    assert current.splitlines() == [
        "#GPU server%3A SGLang",
        "arch: amd64",
        "cores: 64",
        "dev0: /dev/nvidia0,mode=0666",
        "lxc.apparmor.profile: unconfined",
        "parent: sgpve-20261130-101010-config",
        "lxc.mount.entry: /tank/shared shared none bind,create=dir 0 0",
        "lxc.mount.entry: /tank/data data none bind,ro,create=dir 0 0",
    ]
    assert rest == CONF.split("\n[pve:pending]", 1)[1]  # pending changes and snapshots untouched


def request_for(tmp_path: Path, **changes) -> dict:
    request = {
        "vmid": 129,
        "path": str(tmp_path / "129.conf"),
        "lock": str(tmp_path / "run-lock-lxc" / "pve-config-129.lock"),
        "digest": hashlib.sha1(CONF.encode()).hexdigest(),
        "remove": [],
        "add": ["lxc.mount.entry: /x x none bind,create=dir 0 0"],
    }
    return request | changes


def run_on_node(request: dict) -> subprocess.CompletedProcess:
    """conffile as the toolkit runs it on the node: its source through python3 -c."""
    source = Path(conffile.__file__).read_text()
    return subprocess.run([sys.executable, "-c", source, json.dumps(request)], capture_output=True, text=True)


def wait_until_blocked_on(lock: Path) -> None:
    """Until some process waits for the flock on `lock` (a "->" line in /proc/locks, Linux's
    fs/locks.c lock_get_status): then it is inside lock_config, not before it."""
    inode = os.stat(lock).st_ino
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields and fields[-3].endswith(f":{inode}"):
                return
        time.sleep(0.01)
    raise AssertionError(f"nobody waits for {lock}")


def test_the_digest_is_checked_before_the_file_is_replaced(tmp_path, capsys):
    path = tmp_path / "129.conf"
    path.write_text(CONF)
    request = request_for(tmp_path)
    assert conffile.main(["conffile", json.dumps(request | {"digest": "0" * 40})]) == 3
    assert path.read_text() == CONF and "changed since it was read" in capsys.readouterr().err
    assert conffile.main(["conffile", json.dumps(request)]) == 0
    assert capsys.readouterr().out.strip() == hashlib.sha1(path.read_bytes()).hexdigest()
    assert "lxc.mount.entry: /x x none bind,create=dir 0 0\n\n[pve:pending]" in path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["129.conf", "run-lock-lxc"]  # no temp file left
    assert [p.name for p in (tmp_path / "run-lock-lxc").iterdir()] == ["pve-config-129.lock"]  # made as PVE makes it


def test_a_lock_key_refuses_the_edit_naming_the_lock_and_the_fix(tmp_path):
    locked = CONF.replace("cores: 64\n", "cores: 64\nlock: backup\n")
    (tmp_path / "129.conf").write_text(locked)
    result = run_on_node(request_for(tmp_path, digest=hashlib.sha1(locked.encode()).hexdigest()))
    assert result.returncode == conffile.LOCKED
    assert "CT is locked (backup)" in result.stderr and "pct unlock 129" in result.stderr
    assert (tmp_path / "129.conf").read_text() == locked


def test_a_lock_in_a_snapshot_section_does_not_count(tmp_path):
    text = CONF + "lock: snapshot\n"  # the last section is a snapshot's: not the container's lock
    (tmp_path / "129.conf").write_text(text)
    assert run_on_node(request_for(tmp_path, digest=hashlib.sha1(text.encode()).hexdigest())).returncode == 0


def hold_pve_lock(lock: Path, then=None):
    """Another PVE writer: takes the CT's flock, waits until the edit blocks on it, runs `then`
    (its own write) and releases; returns the thread."""
    lock.parent.mkdir(exist_ok=True)
    handle = open(lock, "a")
    fcntl.flock(handle, fcntl.LOCK_EX)

    def holder():
        with handle:
            wait_until_blocked_on(lock)
            if then:
                then()

    thread = threading.Thread(target=holder)
    thread.start()
    return thread


def test_the_edit_waits_for_pves_lock_and_a_write_made_meanwhile_is_kept(tmp_path):
    path = tmp_path / "129.conf"
    path.write_text(CONF)
    request = request_for(tmp_path)
    theirs = CONF.replace("cores: 64", "cores: 96")
    holder = hold_pve_lock(Path(request["lock"]), then=lambda: path.write_text(theirs))
    result = run_on_node(request)  # read the digest before their write: sees it, refuses
    holder.join()
    assert result.returncode == conffile.DIGEST_CHANGED and "changed since it was read" in result.stderr
    assert "trying to acquire lock..." in result.stderr
    assert path.read_text() == theirs
    again = run_on_node(request | {"digest": hashlib.sha1(theirs.encode()).hexdigest()})
    assert again.returncode == 0 and "cores: 96" in path.read_text() and "/x x none" in path.read_text()


def test_a_lock_never_released_gives_up_after_the_timeout_with_pves_message(tmp_path):
    path = tmp_path / "129.conf"
    path.write_text(CONF)
    request = request_for(tmp_path, timeout=1)
    done = threading.Event()
    holder = hold_pve_lock(Path(request["lock"]), then=done.wait)  # held until the edit gave up
    result = run_on_node(request)
    done.set()
    holder.join()
    assert result.returncode == conffile.LOCK_TIMEOUT
    assert f"can't lock file '{request['lock']}' - got timeout" in result.stderr
    assert path.read_text() == CONF
