"""The toolkit's hotplug table (sglang_pve/provision/hotplug.py) against the cases pve-container's
code decides (src/PVE/LXC/Config.pm at 94f5585, vmconfig_hotplug_pending for a running CT; each
case names the branch that decides it), and the diff's restart decision built on it."""

import pytest

from sglang_pve.config.proxmox import RootFs
from sglang_pve.provision.desired import Desired
from sglang_pve.provision.diff import diff_config
from sglang_pve.provision.hotplug import applies_live, stays_pending

NET = "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=10.0.0.129/24,type=veth"

# (key, old value in the current config, new value or None for a delete, stays in [pve:pending])
CASES = [
    # $LXC_FASTPLUG_OPTIONS: "$conf->{$opt} = delete $conf->{pending}->{$opt}"
    ("cores", "4", "8", False),
    ("hostname", "a", "b", False),
    ("onboot", "0", "1", False),
    ("startup", None, "order=2", False),
    ("description", None, "x", False),
    ("tags", None, "gpu", False),
    ("protection", None, "1", False),
    # pending delete of a fastplug option: "# pass", then deleted
    ("startup", "order=2", None, False),
    ("cores", "4", None, False),
    # cgroup hotplug: $hotplug_memory, change_cpu_quota, change_cpu_shares
    ("memory", "4096", "8192", False),
    ("swap", "512", "0", False),
    ("cpulimit", None, "4", False),
    ("cpuunits", "100", "200", False),
    # delete: swap -> $hotplug_memory->(undef, 0); cpulimit/cpuunits reset
    ("swap", "512", None, False),
    ("cpulimit", "4", None, False),
    # netN: update_net (add: hotplug_net; change: veth replug or tap_plug) ...
    ("net0", None, NET, False),
    ("net0", NET, NET.replace("10.0.0.129", "10.0.0.130"), False),
    # ... and delete: veth_delete
    ("net0", NET, None, False),
    # mpN: "don't try to hotplug over existing mp"; a new one: apply_pending_mountpoint($running=1)
    ("mp0", None, "/srv/models,mp=/models", False),
    ("mp0", "/srv/models,mp=/models", "/srv/models,mp=/models,ro=1", True),
    # devN: "don't try to hotplug over existing dev"; a new one: device_passthrough_hotplug
    ("dev8", None, "/dev/nvidia8", False),
    ("dev0", "/dev/nvidia0", "/dev/nvidia0,mode=0666", True),
    # "die "skip\n"; # skip non-hotpluggable": features, nameserver, ostype, ...
    ("features", "nesting=1", "nesting=0", True),
    ("features", None, "nesting=1", True),
    ("nameserver", None, "10.0.0.1", True),
    ("timezone", None, "UTC", True),
    # deletes that are not hotplugged: mpN, devN, features
    ("mp0", "/srv/models,mp=/models", None, True),
    ("dev0", "/dev/nvidia0", None, True),
    ("features", "nesting=1", None, True),
    # unusedN: delete_mountpoint_volume at once
    ("unused0", "local:129/vm-129-disk-1.raw", None, False),
]


@pytest.mark.parametrize("key, old, new, pending", CASES, ids=[f"{c[0]}:{c[1]}->{c[2]}" for c in CASES])
def test_what_stays_pending_on_a_running_container_follows_pve_container(key, old, new, pending):
    assert stays_pending(key, old, new) is pending


def test_hostname_and_hookscript_are_written_at_once_but_act_at_start():
    """LXC_FASTPLUG_OPTIONS holds hostname, but Setup/Base.pm pre_start_hook is what sets it."""
    assert not stays_pending("hostname", "a", "b") and not applies_live("hostname", "a", "b")
    assert not applies_live("hookscript", None, "local:snippets/h.pl")
    assert applies_live("cores", "4", "8") and applies_live("net0", NET, NET.replace("eth0", "eth1"))


def wanted(**config) -> Desired:
    return Desired(config, [], RootFs(storage="local", size_gb=8), {}, [])


CURRENT = {"cores": "4", "hostname": "a", "rootfs": "local:129/vm-129-disk-0.raw,size=8G", "digest": "ab"}


def test_a_start_only_change_and_a_live_one_in_one_diff():
    diff = diff_config(wanted(cores="8", hostname="b", features="nesting=1"), CURRENT, {195})
    assert [c.key for c in diff.changes] == ["cores", "hostname", "features"]
    assert diff.restart_keys == ["features", "hostname"]


def test_pending_left_by_anyone_is_seen_and_owes_a_restart_even_when_it_is_what_we_want():
    diff = diff_config(wanted(cores="4", hostname="a", features="nesting=1"), CURRENT, {195}, {"features": "nesting=1"})
    assert diff.changes == [] and diff.empty
    assert diff.lines() == ["features: (unset) -> nesting=1 (pending: applies at the next start)"]
    assert diff.restart_keys == ["features"]


def test_a_pending_value_changed_back_to_the_running_one_owes_nothing():
    """cleanup_pending drops a pending value equal to the current one (pve-guest-common AbstractConfig.pm)."""
    diff = diff_config(wanted(cores="4", hostname="a"), CURRENT | {"features": "nesting=1"}, {195}, {"features": None})
    assert [c.line() for c in diff.changes] == []  # a pending delete of a key we do not want: nothing to write
    assert diff.restart_keys == ["features"]  # but it waits for a start
    back = diff_config(
        wanted(cores="4", hostname="a", features="nesting=1"),
        CURRENT | {"features": "nesting=1"},
        {195},
        {"features": None},
    )
    assert [c.line() for c in back.changes] == ["features: (unset) -> nesting=1"] and back.restart_keys == []


def test_a_deleted_key_with_a_pending_value_is_reverted_then_deleted():
    """update_pct_config queues delete= but keeps the pending value, which vm_start would apply."""
    diff = diff_config(
        wanted(cores="4", hostname="a"), CURRENT | {"features": "nesting=1"}, {195}, {"features": "nesting=1,keyctl=1"}
    )
    assert diff.reverted == ["features"] and diff.deleted == [] and diff.deleted_after_revert == ["features"]
    assert diff.restart_keys == ["features"]
    only_pending = diff_config(wanted(cores="4", hostname="a"), CURRENT, {195}, {"features": "nesting=1"})
    assert only_pending.reverted == ["features"] and only_pending.deleted_after_revert == []
    assert only_pending.restart_keys == []


def test_raw_lines_always_wait_for_a_start():
    diff = diff_config(
        Desired(
            {"cores": "4", "hostname": "a"},
            [("lxc.mount.entry", "/srv m none bind,create=dir 0 0")],
            RootFs(storage="local", size_gb=8),
            {},
            [],
        ),
        CURRENT,
        {195},
    )
    assert diff.restart_keys == ["lxc"]
