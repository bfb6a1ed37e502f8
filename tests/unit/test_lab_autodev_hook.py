"""lab/autodev_hook.sh, the guests' lxc.hook.autodev, run as LXC runs it (name, section, type as
arguments; LXC_ROOTFS_MOUNT and LXC_CONFIG_FILE set) in a mount namespace of its own; the cases
are pve-container's: src/lxc-pve-autodev-hook and src/PVE/LXC/Tools.pm lxc_hook and for_devices."""

import os
import shutil
import stat
import subprocess

import pytest

from lab import devn

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="mknod and a mount namespace need root"
)


@pytest.fixture
def guest(tmp_path):
    """A guest's LXC dir with its passthrough dir, and an empty rootfs with /dev."""
    (tmp_path / "lxc/129/passthrough/dev/dri").mkdir(parents=True)
    (tmp_path / "lxc/129/config").write_text("")
    (tmp_path / "rootfs/dev").mkdir(parents=True)
    for name, major, minor in (("null", 1, 3), ("dri/zero", 1, 5), ("0", 195, 0)):
        os.mknod(tmp_path / "lxc/129/passthrough/dev" / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return tmp_path


def run_hook(root, devices: str, *args: str, inspect: str = "") -> subprocess.CompletedProcess:
    """The hook, then ``inspect`` (sh) in the same mount namespace, where its binds are seen."""
    (root / "lxc/129/passthrough/devices").write_text(devices)
    env = {
        "PATH": os.environ["PATH"],
        "LXC_ROOTFS_MOUNT": str(root / "rootfs"),
        "LXC_CONFIG_FILE": str(root / "lxc/129/config"),
    }
    script = f'/bin/sh "$0" "$@" && {inspect or ":"}'
    argv = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, str(devn.HOOK), *args]
    return subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True, timeout=30)


def test_each_listed_node_is_bound_over_an_empty_file_in_dev(guest):
    devices = "c:1:3:/dev/null\nc:1:5:/dev/dri/zero\nc:195:0:/dev/0\n"  # minor 0 and a name 0 too
    inspect = "stat -c '%n %F %t:%T' rootfs/dev/null rootfs/dev/dri/zero rootfs/dev/0"
    result = run_hook(guest, devices, "129", "lxc", "autodev", inspect=inspect)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "rootfs/dev/null character special file 1:3",
        "rootfs/dev/dri/zero character special file 1:5",
        "rootfs/dev/0 character special file c3:0",
    ]
    # outside the namespace the bind is gone: what is left is the hook's mknod(S_IFREG, 0)
    placeholder = os.lstat(guest / "rootfs/dev/null")
    assert stat.S_ISREG(placeholder.st_mode) and stat.S_IMODE(placeholder.st_mode) == 0 and placeholder.st_size == 0


def test_entries_for_devices_refuses_are_skipped_with_its_warnings(guest):
    devices = (
        "c:1:3:/dev/null\n"
        "c:10:237:/dev/loop-control\n"  # never loop-control
        "c:1:5:/dev/dri/../zero\n"  # never out of /dev
        "x:1:5:/dev/zero\n"  # not b or c
        "c:1:5:/dev/has space\n"  # \S+
        "c:1:5:/tmp/zero\n"  # not under /dev/
    )
    result = run_hook(guest, devices, "129", "lxc", "autodev", inspect="ls -A rootfs/dev")
    assert result.returncode == 0, result.stderr
    devices_file = guest / "lxc/129/passthrough/devices"
    # its warnings on stdout, where LXC logs them; then what /dev holds: only null
    assert result.stdout.splitlines() == [
        "skipping illegal device entry (loop-control) for: loop-control",
        "skipping illegal device node entry: dri/../zero",
        f"invalid {devices_file} entry: x:1:5:/dev/zero",
        f"invalid {devices_file} entry: c:1:5:/dev/has space",
        f"invalid {devices_file} entry: c:1:5:/tmp/zero",
        "null",
    ]


def test_a_node_already_in_dev_fails_the_start(guest):
    """A lxc.mount.entry for the same node ran before (LXC mounts entries before autodev hooks)."""
    (guest / "rootfs/dev/null").write_text("")
    result = run_hook(guest, "c:1:3:/dev/null\n", "129", "lxc", "autodev")
    assert result.returncode == 1
    assert f"Could not mknod {guest}/rootfs/dev/null: File exists" in result.stdout


def test_lxc_hook_entry_checks(guest):
    assert run_hook(guest, "c:1:3:/dev/null\n", "129").returncode == 1  # missing hook parameters
    for args in (("ct129", "lxc", "autodev"), ("129", "lxc", "pre-start"), ("129", "other", "autodev")):
        result = run_hook(guest, "c:1:3:/dev/null\n", *args, inspect="ls -A rootfs/dev")
        assert (result.returncode, result.stdout) == (0, ""), args
    (guest / "lxc/129/passthrough/devices").unlink()
    env = {
        "PATH": os.environ["PATH"],
        "LXC_ROOTFS_MOUNT": str(guest / "rootfs"),
        "LXC_CONFIG_FILE": str(guest / "lxc/129/config"),
    }
    result = subprocess.run(["/bin/sh", str(devn.HOOK), "129", "lxc", "autodev"], env=env, capture_output=True)
    assert result.returncode == 0  # no list: no device
