"""The pure config diff: wanted spec -> Proxmox keys vs GET .../config -> changes, deletes, refusals."""

import doctest

from sglang_pve.config.proxmox import load_container
from sglang_pve.provision import desired, diff, propstring
from sglang_pve.provision.desired import wanted_config, wanted_raw_lines
from sglang_pve.provision.diff import diff_config, owned_raw_line
from sglang_pve.provision.passthrough import nvidia_devices, proxmox_dev_options
from tests.unit.proxmox_data import CONTAINER

SPEC = load_container("sglang1", {"container": CONTAINER})
DEVICES = proxmox_dev_options(nvidia_devices(range(8), uvm_major=511))

# What PVE returns for that container after creating it: its own key order, type=veth, size, digest.
CURRENT = {
    "arch": "amd64",
    "cores": 64,
    "memory": 524288,
    "swap": 0,
    "hostname": "sglang1",
    "onboot": 1,
    "features": "nesting=1",
    "startup": "up=30,order=2",
    "ostype": "debian",
    "net0": "name=eth0,bridge=vmbr0,gw=10.0.0.1,hwaddr=02:00:0A:00:00:81,ip=10.0.0.129/24,type=veth",
    "rootfs": "local-zfs:subvol-129-disk-0,size=200G",
    "digest": "0" * 40,
    **{key: value.replace(",mode=0666", ",mode=0666") for key, value in DEVICES.items()},
    "lxc": [
        ["lxc.mount.entry", "/tank/shared shared none bind,ro,create=dir 0 0"],
        ["lxc.mount.entry", "/tank/data data none bind,ro,create=dir 0 0"],
        ["lxc.apparmor.profile", "unconfined"],
        ["lxc.mount.entry", "/srv/x x none rbind,optional 0 0"],
    ],
}


def compare(current: dict, spec=SPEC, majors=frozenset({195, 511})):
    """The spec as built for a node with 8 GPUs (the devN keys of DEVICES for gpus: all) vs `current`."""
    wanted = desired.build(spec, list(range(8)), {"nvidia": 195, "nvidia-uvm": 511}, None)
    return diff_config(wanted, current, set(majors))


def test_doctests():
    for module in (desired, diff, propstring):
        assert doctest.testmod(module).failed == 0


def test_what_pve_returns_for_the_spec_is_no_change():
    result = compare(CURRENT)
    assert result.empty and result.lines() == [] and result.refusals == []


def test_order_and_boolean_spelling_inside_property_strings_do_not_matter():
    current = CURRENT | {
        "features": "nesting=true",
        "dev0": "mode=0666,path=/dev/nvidia0",
        "net0": "bridge=vmbr0,ip=10.0.0.129/24,name=eth0,type=veth,gw=10.0.0.1,hwaddr=02:00:0A:00:00:81",
    }
    assert compare(current).empty


def test_changed_and_removed_keys_are_listed_key_old_new():
    spec = load_container(
        "sglang1",
        {"container": CONTAINER | {"cores": 96, "startup": None, "features": {"nesting": True, "keyctl": True}}},
    )
    result = compare(CURRENT, spec=spec)
    assert result.lines() == [
        "cores: 64 -> 96",
        "features: nesting=1 -> keyctl=1,nesting=1",
        "startup: up=30,order=2 -> (deleted)",
    ]
    assert result.put_parameters == {"cores": "96", "features": "keyctl=1,nesting=1"} and result.deleted == ["startup"]


def test_fewer_gpus_delete_the_extra_dev_keys_and_a_missing_mac_is_pves_business():
    spec = load_container(
        "sglang1",
        {
            "container": CONTAINER
            | {"gpus": [0, 1], "net0": {"bridge": "vmbr0", "ip": "10.0.0.129/24", "gw": "10.0.0.1"}}
        },
    )
    result = compare(CURRENT, spec=spec)
    assert result.deleted == ["dev5", "dev6", "dev7", "dev8", "dev9", "dev10"]
    assert [c.key for c in result.changes if c.new] == ["dev2", "dev3", "dev4"]  # nvidiactl, uvm, uvm-tools moved up


def test_raw_lines_only_the_toolkits_own_change_others_stay():
    spec = load_container(
        "sglang1", {"container": CONTAINER | {"mounts": [{"host": "/tank/shared", "path": "/shared", "ro": False}]}}
    )
    result = compare(CURRENT, spec=spec)
    assert result.lines() == [
        "lxc: - lxc.mount.entry: /tank/shared shared none bind,ro,create=dir 0 0",
        "lxc: - lxc.mount.entry: /tank/data data none bind,ro,create=dir 0 0",
        "lxc: + lxc.mount.entry: /tank/shared shared none bind,create=dir 0 0",
    ]
    assert all("apparmor" not in line and "rbind" not in line for line in result.raw_old + result.raw_new)


def test_an_operators_devn_is_kept_and_the_toolkits_move_around_it():
    """Only the NVIDIA nodes the toolkit passes are its devN (/dev/dri, /dev/fuse are someone
    else's): never deleted, their index never taken."""
    operators = {"dev11": "/dev/dri/renderD128,gid=104,mode=0660", "dev12": "/dev/fuse"}
    assert compare(CURRENT | operators).empty  # beside the toolkit's: nothing to do
    assert compare(
        CURRENT | operators, spec=load_container("sglang1", {"container": CONTAINER | {"gpus": [0]}})
    ).deleted == [
        "dev4",
        "dev5",
        "dev6",
        "dev7",
        "dev8",
        "dev9",
        "dev10",
    ]
    # an operator's dev0 taken before the toolkit's first run: the toolkit's go to dev1..dev11, kept where they are
    first = {k: v for k, v in CURRENT.items() if not k.startswith("dev")} | {"dev0": "/dev/fuse"}
    result = compare(first)
    assert result.deleted == [] and "dev0" not in result.put_parameters
    assert [result.put_parameters[f"dev{i}"] for i in (1, 9, 11)] == [
        "/dev/nvidia0,mode=0666",
        "/dev/nvidiactl,mode=0666",
        "/dev/nvidia-uvm-tools,mode=0666",
    ]
    placed = first | result.put_parameters
    assert compare(placed).empty  # and the next run leaves them there


def test_raw_passthrough_lines_follow_the_nodes_uvm_major():
    spec = load_container("sglang1", {"container": CONTAINER | {"passthrough": "raw", "mounts": []}})
    lines = wanted_raw_lines(spec, nvidia_devices([0], uvm_major=509))
    assert ("lxc.cgroup2.devices.allow", "c 509:0 rw") in lines
    assert ("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file") in lines
    stale = [("lxc.cgroup2.devices.allow", "c 511:0 rwm"), ("lxc.cgroup2.devices.allow", "c 10:200 rwm")]
    assert [owned_raw_line(k, v, {195, 509, 511}) for k, v in stale] == [True, False]


def test_unchangeable_keys_are_refused_with_the_reason():
    spec = load_container(
        "sglang1", {"container": CONTAINER | {"unprivileged": True, "rootfs": {"storage": "local-lvm", "size_gb": 100}}}
    )
    found = {p.key: p.render("sglang1") for p in compare(CURRENT, spec=spec).refusals}
    assert set(found) == {"container.unprivileged", "container.rootfs.storage", "container.rootfs.size_gb"}
    assert "the container is privileged; Proxmox cannot change that in place" in found["container.unprivileged"]
    assert "pct move-volume <vmid> rootfs local-lvm" in found["container.rootfs.storage"]
    assert "already has 200 GB and volumes cannot shrink" in found["container.rootfs.size_gb"]


def test_a_bigger_root_volume_is_a_resize():
    spec = load_container("sglang1", {"container": CONTAINER | {"rootfs": {"storage": "local-zfs", "size_gb": 300}}})
    result = compare(CURRENT, spec=spec)
    assert result.resize_gb == 300 and result.lines() == ["rootfs: size -> 300G"] and not result.refusals


def test_create_parameters_carry_every_key_with_booleans_as_1_0():
    params = desired.create_parameters(SPEC, wanted_config(SPEC, DEVICES), "ssh-ed25519 AAAA x")
    assert params["unprivileged"] == "0" and params["onboot"] == "1" and params["start"] == "0"
    assert params["rootfs"] == "local-zfs:200" and params["dev8"] == "/dev/nvidiactl,mode=0666"
    assert params["startup"] == "order=2,up=30" and params["ssh-public-keys"] == "ssh-ed25519 AAAA x"
    assert not any(isinstance(v, bool) for v in params.values())
