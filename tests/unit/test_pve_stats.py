"""A container's status fields as pve-container's vmstatus computes them (src/PVE/LXC.pm vmstatus,
commit 94f5585), one case per rule of it; the node's as API2Tools.pm extract_node_stats."""

import os
from types import SimpleNamespace

import pytest

from lab.pve import conf, stats

GIB, MIB = 1 << 30, 1 << 20


def node(status="stopped", version=9):
    return SimpleNamespace(version=version, name="pve1", started=0, backend=SimpleNamespace(status=lambda vmid: status))


@pytest.mark.parametrize(
    "config, expected",
    [
        ("", {"name": "CT129", "cpus": os.cpu_count(), "maxmem": 512 * MIB, "maxswap": 0, "maxdisk": 4 * GIB}),
        ("hostname: sglang 1\n", {"name": "sglang1"}),  # `$d->{name} =~ s/[\s]//g`
        ("cores: 8\ncpulimit: 2\n", {"cpus": 8}),  # cores || cpulimit || the node's cpu count
        ("cpulimit: 1.5\n", {"cpus": 1.5}),
        ("cpulimit: 0\n", {"cpus": os.cpu_count()}),  # 0 is unlimited: falls through
        ("memory: 4096\nswap: 1024\n", {"maxmem": 4096 * MIB, "maxswap": 1024 * MIB}),
        ("rootfs: local-zfs:subvol-129-disk-0,size=200G\n", {"maxdisk": 200 * GIB}),
        ("rootfs: local-lvm:vm-129-disk-0\n", {"maxdisk": 4 * GIB}),  # no size: 4 GiB
        ("template: 1\nlock: backup\ntags: a;b\n", {"template": 1, "lock": "backup", "tags": "a;b"}),
    ],
)
def test_vmstatus_follows_pve_container(config, expected):
    status = stats.vmstatus(node(), 129, conf.parse(config))
    assert {k: status[k] for k in expected} == expected
    assert status["status"] == "stopped" and status["type"] == "lxc" and status["vmid"] == 129
    assert all(status[k] == 0 for k in ("mem", "disk", "cpu", "uptime", "netin", "netout", "diskread", "diskwrite"))
    assert ("template" in status) == ("template" in expected)  # only a template says so


def test_a_running_container_has_pve9s_pressures_only_on_pve9():
    assert stats.vmstatus(node("running", 9), 129, conf.parse(""))["pressurecpusome"] == 0
    assert "pressurecpusome" not in stats.vmstatus(node("running", 8), 129, conf.parse(""))
    assert "pressurecpusome" not in stats.vmstatus(node("stopped", 9), 129, conf.parse(""))


def test_node_stats_are_the_machines():
    entry = stats.node_stats(node())
    assert entry["id"] == "node/pve1" and entry["status"] == "online" and entry["level"] == ""
    assert entry["maxcpu"] == os.cpu_count() and 0 <= entry["cpu"] <= 1
    assert 0 < entry["mem"] < entry["maxmem"] and 0 < entry["disk"] < entry["maxdisk"]
