"""guestd's translation of a Proxmox container config into an LXC config (lab/guests.py), without
starting anything: what pve-container's update_lxc_config would make of the same config."""

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from lab import devn, guests, layout

NODE_PATH = guests.node_path  # before the fixture replaces it

CONFIG = """\
# a description line
arch: amd64
cores: 64
dev0: /dev/null,mode=0666
dev1: path=/dev/zero,deny-write=1,gid=5
hostname: sglang1
memory: 4096
mp0: /srv/models,mp=/shared,ro=1
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=10.9.0.11/24,gw=10.9.0.1,type=veth
rootfs: local-zfs:subvol-129-disk-0,size=8G
swap: 0
unprivileged: {unprivileged}
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.mount.entry: /srv/data data none bind,create=dir 0 0
lxc.rootfs.path: /elsewhere
lxc.cgroup2.devices.allow = c 10:200 rwm

[before-upgrade]
hostname: old-name
"""


@pytest.fixture
def lab_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "LXC_PATH", tmp_path / "lxc")
    monkeypatch.setattr(
        guests, "NODE", dataclasses.replace(guests.NODE, dir=tmp_path / "node", volumes_dir=tmp_path / "volumes")
    )
    node_root = tmp_path / "node-root"
    for directory in ("srv/models", "srv/data"):
        (node_root / directory).mkdir(parents=True)
    # paths on the node: its real devices stand in for the GPUs, its dirs for the storage
    monkeypatch.setattr(
        guests, "node_path", lambda path: Path(path) if path.startswith("/dev/") else node_root / path[1:]
    )
    return tmp_path


def record(vmid: int, unprivileged: bool) -> None:
    guests.guest_dir(vmid).mkdir(parents=True)
    data = {"rootfs": "local-zfs:subvol-129-disk-0", "lower": "/cache/rootfs", "unprivileged": unprivileged}
    (guests.guest_dir(vmid) / "guest.json").write_text(json.dumps(data))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of the passthrough copies needs root")
def test_a_privileged_config_becomes_the_lxc_config_pve_container_writes(lab_dirs):
    record(129, unprivileged=False)
    lines = guests.build_config(129, CONFIG.format(unprivileged=0)).splitlines()
    upper = guests.NODE.volumes_dir / "local-zfs/subvol-129-disk-0/upper"
    passthrough = layout.LXC_PATH / "129/passthrough/dev"
    assert "lxc.uts.name = sglang1" in lines  # the current section, not the snapshot's
    assert f"lxc.rootfs.path = overlay:/cache/rootfs:{upper}" in lines
    assert {
        "lxc.net.0.link = " + layout.BRIDGE,
        "lxc.net.0.hwaddr = bc:24:11:aa:bb:cc",
        "lxc.net.0.ipv4.address = 10.9.0.11/24",
        "lxc.net.0.ipv4.gateway = 10.9.0.1",
    } <= set(lines)
    assert {
        "lxc.cgroup2.memory.max = 4294967296",
        "lxc.cgroup2.memory.swap.max = 0",
        "lxc.cgroup.memory.limit_in_bytes = 4294967296",
        f"lxc.cgroup.cpuset.cpus = 0-{os.cpu_count() - 1}",
    } <= set(lines)
    assert f"lxc.mount.entry = {lab_dirs}/node-root/srv/models shared none bind,ro,create=dir 0 0" in lines
    # devN (pve-container LXC.pm update_lxc_config): rw, or r plus a deny of w with deny-write, before
    # the raw lines; the nodes reach /dev through the prestart hook's list and the autodev hook
    assert lines.index("lxc.cgroup2.devices.allow = c 1:3 rw") < lines.index("lxc.cgroup2.devices.allow = c 195:* rwm")
    assert ["lxc.cgroup2.devices.allow = c 1:5 r", "lxc.cgroup2.devices.deny = c 1:5 w"] == [
        line for line in lines if " c 1:5 " in line and line.startswith("lxc.cgroup2.")
    ]
    assert (passthrough.parent / "devices").read_text() == "c:1:3:/dev/null\nc:1:5:/dev/zero\n"
    assert f"lxc.hook.autodev = /bin/sh {devn.HOOK}" in lines
    assert not [line for line in lines if "dev/null" in line and line.startswith("lxc.mount.entry")]
    # raw lines last, in config order, the mount source a node path; every cgroup2 device rule doubled for v1
    assert f"lxc.mount.entry = {lab_dirs}/node-root/srv/data data none bind,create=dir 0 0" in lines
    raw_rules = ["lxc.cgroup2.devices.allow = c 195:* rwm", "lxc.cgroup2.devices.allow = c 10:200 rwm"]
    assert [line for line in lines if line in raw_rules] == raw_rules
    assert [line for line in lines if line.startswith("lxc.cgroup.devices.")] == [
        "lxc.cgroup.devices.allow = c 1:3 rw",
        "lxc.cgroup.devices.allow = c 1:5 r",
        "lxc.cgroup.devices.deny = c 1:5 w",
        "lxc.cgroup.devices.allow = c 195:* rwm",
        "lxc.cgroup.devices.allow = c 10:200 rwm",
    ]
    assert not [line for line in lines if line.startswith(("lxc.idmap", "lxc.rootfs.path = /"))]
    null = os.stat(passthrough / "null")
    assert stat.S_ISCHR(null.st_mode) and stat.S_IMODE(null.st_mode) == 0o666 and null.st_rdev == os.makedev(1, 3)
    assert stat.S_IMODE(os.stat(passthrough / "zero").st_mode) == 0o660  # PVE's default mode
    assert (os.stat(passthrough / "zero").st_uid, os.stat(passthrough / "zero").st_gid) == (0, 5)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of the passthrough copies needs root")
def test_an_unprivileged_config_gets_the_id_map_and_shifted_owners(lab_dirs):
    record(130, unprivileged=True)
    lines = guests.build_config(130, CONFIG.format(unprivileged=1)).splitlines()
    assert ["lxc.idmap = u 0 100000 65536", "lxc.idmap = g 0 100000 65536"] == [
        line for line in lines if line.startswith("lxc.idmap")
    ]
    assert os.stat(layout.LXC_PATH / "130/passthrough/dev/null").st_uid == guests.UID_SHIFT
    # LXC.pm map_ct_gid_to_host: gid 5 in the container is 100005 on the host
    assert os.stat(layout.LXC_PATH / "130/passthrough/dev/zero").st_gid == guests.UID_SHIFT + 5


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of the passthrough copies needs root")
@pytest.mark.parametrize(
    "entries, message",
    [
        # Config.pm verify_lxc_dev_string, parse_device, $dev_desc's mode pattern
        ("dev2: /dev/../etc/shadow", "/dev/../etc/shadow is not a valid device path"),
        ("dev2: /srv/models", "/srv/models is not a valid device path"),
        ("dev2: mode=0666", "Path has to be defined"),
        ("dev2: /dev/null,mode=666", "mode: value does not match the regex pattern"),
        ("dev2: /dev/null,deny-write=maybe", "deny-write: type check"),
        ("dev2: /dev/null,colour=red", "invalid key in comma-separated list property: colour"),
        # Tools.pm get_device_mode_and_rdev, at every start
        ("dev2: /dev/nvidia99", "Device /dev/nvidia99 does not exist"),
        ("dev2: /dev/shm", "/dev/shm is not a device"),
        # LXC.pm create_passthrough_device_node: one path twice
        ("dev2: /dev/full\ndev3: /dev/full,mode=0600", "failed to mknod .*/passthrough/dev/full: File exists"),
    ],
)
def test_devn_entries_pve_container_refuses(lab_dirs, entries, message):
    record(132, unprivileged=False)
    config = CONFIG.format(unprivileged=0).replace("hostname: sglang1\n", f"{entries}\nhostname: sglang1\n")
    with pytest.raises(guests.LabError, match=message):
        guests.build_config(132, config)


def test_a_config_the_volume_does_not_match_is_refused(lab_dirs):
    record(131, unprivileged=False)
    with pytest.raises(guests.GuestError, match="'unprivileged' differs"):
        guests.build_config(131, CONFIG.format(unprivileged=1))
    with pytest.raises(guests.GuestError, match="bridge 'vmbr1' does not exist"):
        guests.build_config(131, CONFIG.format(unprivileged=0).replace("bridge=vmbr0", "bridge=vmbr1"))


def test_volume_ids_and_node_paths_cannot_escape(lab_dirs):
    with pytest.raises(guests.GuestError, match="unable to parse volume ID"):
        guests.volume_dir("local-zfs:../../etc")
    assert guests.volume_dir("local-zfs:subvol-129-disk-0") == guests.NODE.volumes_dir / "local-zfs/subvol-129-disk-0"
    for path in ("/shared/../../etc", "relative/path"):
        with pytest.raises(guests.GuestError, match="absolute path .* without '..'"):
            NODE_PATH(path)
    assert NODE_PATH("/shared/models") == layout.STORAGE_MOUNTS["/shared"] / "models"


@pytest.fixture
def lab_commands(monkeypatch):
    """Every lxc-* command and guest shell script guests.hotplug runs, instead of running them."""
    ran = []
    monkeypatch.setattr(guests.container, "lxc", lambda command, name, *args, **kw: ran.append([command, *args]))
    monkeypatch.setattr(guests, "run", lambda argv, **kw: ran.append(["attach", argv[-1]]))
    return ran


NET = "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=10.0.0.150/24,type=veth"


def test_hotplug_makes_what_pve_container_hotplugs_real_or_refuses(lab_commands, monkeypatch):
    """vmconfig_hotplug_pending's live changes (pve-container LXC/Config.pm 94f5585): the cgroup,
    update_ipconfig for ip=/gw=, a new devN; what the lab cannot make real is refused."""
    monkeypatch.setattr(guests, "_unified_cgroup", lambda: True)
    guests.hotplug(150, "memory", "4096", "8192")
    guests.hotplug(150, "cpulimit", None, "2.5")
    guests.hotplug(150, "net0", NET, NET.replace("10.0.0.150/24", "10.0.0.151/24") + ",gw=10.0.0.1")
    guests.hotplug(150, "dev10", None, "/dev/nvidia-uvm-tools,mode=0666")
    assert lab_commands == [
        ["lxc-cgroup", "memory.max", str(8192 << 20)],
        ["lxc-cgroup", "cpu.max", "250000 100000"],
        [
            "attach",
            "ip -4 address flush dev eth0 && ip -4 address add 10.0.0.151/24 dev eth0 && "
            "ip -4 route replace default via 10.0.0.1",
        ],
        ["lxc-device", "add", "/dev/nvidia-uvm-tools"],
        ["attach", "chown 0:0 /dev/nvidia-uvm-tools && chmod 0666 /dev/nvidia-uvm-tools"],
    ]
    monkeypatch.setattr(guests, "_unified_cgroup", lambda: False)
    guests.hotplug(150, "memory", "4096", "2048")
    assert lab_commands[-1] == ["lxc-cgroup", "memory.limit_in_bytes", str(2048 << 20)]
    for key, old, new in [
        ("mp0", None, "/srv,mp=/srv"),
        ("net1", None, NET),
        ("net0", NET, None),
        ("net0", NET, NET.replace("BC:24:11:00:00:01", "BC:24:11:00:00:02")),
    ]:
        with pytest.raises(guests.GuestError):
            guests.hotplug(150, key, old, new)


def test_a_hostname_two_guests_share_names_the_lowest_vmid_and_exec_says_so(monkeypatch, capsys):
    """The scale lab's sglang1 (201) beside the default lab's (129) in one slot: `lab exec sglang1`
    runs in 129 and says which guests share the name; a vmid or a unique hostname says nothing."""
    from lab import cli

    monkeypatch.setattr(guests, "known", lambda: {201: "sglang1", 129: "sglang1", 202: "sglang2"})
    assert cli._container_name("sglang1") == guests.name(129)
    assert "sglang1 names guests 129, 201: 129 (give a vmid)" in capsys.readouterr().err
    assert cli._container_name("201") == guests.name(201) and cli._container_name("sglang2") == guests.name(202)
    assert capsys.readouterr().err == ""
