"""The server's sandbox has one source (sglang_pve/deploy/sandbox.py): the unit renders it whole; the
server's own environment reaches the server only (tests/lab/test_sandbox.py reads what a root step sees)."""

import yaml

from sglang_pve.config import load_deployment
from sglang_pve.deploy import paths, sandbox
from sglang_pve.deploy.render import server_files
from tests.conftest import PROJECT, group_data


def deployment(**data):
    return load_deployment("sglang1", dict(group_data("all"), **data), PROJECT)


def service_lines(unit: str) -> list[tuple[str, str]]:
    section = unit.split("[Service]\n", 1)[1].split("\n[", 1)[0]
    return [tuple(line.split("=", 1)) for line in section.splitlines() if line and not line.startswith("#")]


def test_the_unit_carries_every_sandbox_property_and_the_identity_once():
    d = deployment(server_groups=["video"])
    for server in d.servers.values():
        lines = service_lines(server_files(d, server, "/opt/v")[0].content)
        for prop in (*sandbox.identity("sglang", ["video"]), *sandbox.PROPERTIES):
            assert lines.count(prop) == 1, prop
        names = [name for name, _ in lines]
        assert all(names.count(name) == 1 for name, _ in sandbox.PROPERTIES)  # no second, diverging copy


def test_a_root_server_has_no_sandbox_in_its_unit():
    d = deployment(server_user="root")
    lines = service_lines(server_files(d, d.servers["baseline"], "/opt/v")[0].content)
    assert not {name for name, _ in lines} & ({name for name, _ in sandbox.PROPERTIES} | {"User", "DynamicUser"})


def test_the_servers_environment_is_set_for_the_server_alone_never_for_the_root_steps(tmp_path):
    servers = yaml.safe_load((PROJECT / "group_data" / "servers.yml").read_text())
    servers["servers"]["baseline"] = {
        "env": {"LD_PRELOAD": "/opt/x.so", "SGLANG_FOO": "1"},
        "allow_env": ["LD_PRELOAD"],
    }
    (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
    d = deployment(servers_file=str(tmp_path / "servers.yml"))
    lines = service_lines(server_files(d, d.servers["baseline"], "/opt/v")[0].content)
    unit_wide = {value.split("=", 1)[0] for name, value in lines if name == "Environment"}
    assert unit_wide == {"PYTHONUNBUFFERED", "SGLANG_PVE_UNIT"}  # what an ExecStart*=+ step inherits
    exec_start = dict(lines)["ExecStart"].split()
    assert exec_start[0] == "/usr/bin/env" and exec_start[exec_start.index("/opt/v/bin/python") - 2 :][:2] == [
        "LD_PRELOAD=/opt/x.so",
        "SGLANG_FOO=1",
    ]
    assert {w.split("=", 1)[0] for w in exec_start[1:7]} == set(paths.server_home_env())
