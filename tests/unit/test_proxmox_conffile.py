"""The SSH edit of /etc/pve/lxc/<vmid>.conf: only the current section's own raw lines change,
every other line (description, snapshots, pending changes, foreign raw lines) stays; the config
digest (SHA-1 of the file) is checked first; the file is replaced in one rename."""

import doctest
import hashlib
import json

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


def test_the_digest_is_checked_before_the_file_is_replaced(tmp_path, capsys):
    path = tmp_path / "129.conf"
    path.write_text(CONF)
    request = {"path": str(path), "remove": [], "add": ["lxc.mount.entry: /x x none bind,create=dir 0 0"]}
    assert conffile.main(["conffile", json.dumps(request | {"digest": "0" * 40})]) == 3
    assert path.read_text() == CONF and "changed since it was read" in capsys.readouterr().err
    assert conffile.main(["conffile", json.dumps(request | {"digest": hashlib.sha1(CONF.encode()).hexdigest()})]) == 0
    assert capsys.readouterr().out.strip() == hashlib.sha1(path.read_bytes()).hexdigest()
    assert "lxc.mount.entry: /x x none bind,create=dir 0 0\n\n[pve:pending]" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["129.conf"]  # no temp file left
