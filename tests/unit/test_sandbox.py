"""The server's sandbox has one source (sglang_pve/deploy/sandbox.py): the unit renders it whole."""

from sglang_pve.config import load_deployment
from sglang_pve.deploy import sandbox
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
