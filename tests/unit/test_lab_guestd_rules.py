"""guestd's rules for what pve1 names (issue 16, 7): the raw keys it passes (lab/lxc_keys.py, cases
from pve-container's src/PVE/LXC/Config.pm $valid_lxc_conf_keys, 94f5585), links never followed
(lab/beneath.py), the config read from the node's /etc/pve, not from the request."""

import dataclasses
import os
from pathlib import Path

import pytest

from lab import beneath, guests, layout, lxc_keys

HEADER = "hostname: ct1\nrootfs: local:subvol-9-disk-0\n"


# Config.pm's keys that act on the lab host: every one refused, naming itself
@pytest.mark.parametrize(
    "key",
    [
        "lxc.hook.pre-start",
        "lxc.hook.pre-mount",
        "lxc.hook.mount",
        "lxc.hook.autodev",
        "lxc.hook.start",
        "lxc.hook.stop",
        "lxc.hook.post-stop",
        "lxc.hook.clone",
        "lxc.hook.destroy",
        "lxc.hook.version",
        "lxc.apparmor.profile",
        "lxc.apparmor.allow_nesting",
        "lxc.apparmor.raw",
        "lxc.apparmor.allow_incomplete",
        "lxc.selinux.context",
        "lxc.include",
        "lxc.mount.fstab",
        "lxc.mount.auto",
        "lxc.rootfs.mount",
        "lxc.cap.drop",
        "lxc.cap.keep",
        "lxc.seccomp.profile",
        "lxc.seccomp.notify.proxy",
        "lxc.log.file",
        "lxc.console.logfile",
        "lxc.console.path",
        "lxc.environment.hooks",
        "lxc.net.0.link",
        "lxc.net.1.type",
        "lxc.autodev",
        "lxc.init.cmd",
        "lxc.aa_profile",  # deprecated names of the same keys
    ],
)
def test_a_key_pve_takes_but_that_acts_on_the_lab_host_is_refused(key):
    assert lxc_keys.validity(key) is True  # PVE itself would take it: the refusal is guestd's
    with pytest.raises(guests.GuestError, match=f"refused by the lab's guestd: {key.replace('.', '[.]')}"):
        guests.parse_config(f"{HEADER}{key}: /tmp/x\n", 9)


@pytest.mark.parametrize(
    "line",
    [
        "lxc.mount.entry: /srv/data data none bind,create=dir 0 0",
        "lxc.cgroup2.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.deny = c 195:255 w",
        "lxc.cgroup.devices.allow: c 10:200 rwm",
        "lxc.idmap: u 0 100000 65536",
        "lxc.environment: FOO=bar",
        "lxc.prlimit.nofile: 1048576",
        "lxc.sysctl.kernel.shmmax: 1",
    ],
)
def test_the_keys_the_toolkit_and_the_lab_write_pass(line):
    _, raw = guests.parse_config(HEADER + line + "\n", 9)
    assert [key for key, _ in raw] == [line.split(":")[0].split(" =")[0]]


def test_every_refused_key_is_named_at_once():
    text = HEADER + "lxc.hook.pre-start: /bin/x\nlxc.include: /etc/shadow\nlxc.mount.entry: /a a none bind 0 0\n"
    with pytest.raises(guests.GuestError) as raised:
        guests.parse_config(text, 9)
    assert "lxc.hook.pre-start" in str(raised.value) and "lxc.include" in str(raised.value)


def test_keys_pve_refuses_are_still_dropped_with_pves_warning(capsys):
    options, raw = guests.parse_config(HEADER + "lxc.rootfs.path: /x\nlxc.foo: 1\n", 9)
    assert raw == [] and "lxc.rootfs.path is auto generated from rootfs" in capsys.readouterr().err


def test_a_link_below_the_root_is_never_followed(tmp_path):
    root = tmp_path / "node-root"
    (root / "srv/models").mkdir(parents=True)
    (root / "srv/models/config.json").write_text("{}")
    os.symlink("/etc", root / "etc-link")  # absolute: through /proc/<pid>/root it names the lab host's /etc
    os.symlink("models", root / "srv/rel")  # relative links too: none is followed
    assert beneath.beneath(root, "/srv/models/config.json") == root / "srv/models/config.json"
    assert beneath.beneath(root, "/srv/missing/x") == root / "srv/missing/x"  # missing: the caller says so
    for path in ("/etc-link", "/etc-link/shadow", "/srv/rel/config.json"):
        with pytest.raises(beneath.LinkError, match="is a symbolic link"):
            beneath.beneath(root, path)
    with pytest.raises(beneath.LinkError, match="'..'"):
        beneath.beneath(root, "/srv/../etc-link")


def test_node_paths_refuse_links_on_the_node(tmp_path, monkeypatch):
    root = tmp_path / "proc-root"
    (root / "srv").mkdir(parents=True)
    os.symlink("/", root / "srv/host")
    monkeypatch.setattr(guests.container, "init_pid", lambda name: 1)
    monkeypatch.setattr(guests, "Path", lambda p: root if p == "/proc/1/root" else Path(p))
    monkeypatch.setattr(layout, "STORAGE_MOUNTS", {})
    with pytest.raises(guests.GuestError, match="'/srv/host' is a symbolic link"):
        guests.node_path("/srv/host/etc")
    assert guests.node_path("/srv/models") == root / "srv/models"


def test_the_config_is_read_from_the_nodes_etc_pve_without_links(tmp_path, monkeypatch):
    monkeypatch.setattr(guests, "NODE", dataclasses.replace(guests.NODE, dir=tmp_path))
    lxc = tmp_path / "etc-pve/nodes" / layout.NODE / "lxc"
    lxc.mkdir(parents=True)
    (lxc / "9.conf").write_text(HEADER)
    assert guests.node_config(9) == HEADER
    os.symlink("/etc/shadow", lxc / "10.conf")
    with pytest.raises(guests.GuestError, match="is a symbolic link"):
        guests.node_config(10)
    with pytest.raises(guests.GuestError, match="no /etc/pve/nodes/"):
        guests.node_config(11)
