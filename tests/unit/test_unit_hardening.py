"""The server unit's hardening (issue 16, deliver 4): the properties a host's systemd knows, the IP
allow list from the host's own addresses and server_clients, and the warning for an open bind
without clients. tests/lab/test_deploy.py scores the deployed unit with systemd itself."""

import pytest

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.deploy import sandbox
from sglang_pve.deploy.facts.unit_host import UnitHost
from sglang_pve.deploy.preflight.auth import client_warnings
from sglang_pve.deploy.render import release, server_files
from tests.conftest import PROJECT, group_data

HOST = UnitHost(252, ("10.0.0.11", "fd00::11"))


def deployment(**data):
    return load_deployment("sglang1", dict(group_data("all"), **data), PROJECT)


def service(unit: str) -> dict[str, list[str]]:
    section = unit.split("[Service]\n", 1)[1].split("\n[", 1)[0]
    out: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("=", 1)
            out.setdefault(name, []).append(value)
    return out


def unit_of(d, host=HOST) -> dict[str, list[str]]:
    return service(server_files(d, d.servers["baseline"], "/opt/v", host)[0].content)


def test_the_unit_hides_other_processes_and_proc_files_has_its_own_ipc_and_a_syscall_filter():
    lines = unit_of(deployment())
    assert lines["ProtectProc"] == ["invisible"] and lines["ProcSubset"] == ["pid"]
    assert lines["PrivateIPC"] == ["yes"] and lines["PrivateMounts"] == ["yes"]
    assert lines["SystemCallFilter"] == ["@system-service"] and lines["SystemCallErrorNumber"] == ["EPERM"]


def test_ip_traffic_only_with_the_loopback_the_hosts_own_addresses_and_the_clients():
    lines = unit_of(deployment(server_clients=["192.168.10.0/24", "10.0.0.11"]))
    assert lines["IPAddressDeny"] == ["any"]
    # one line; the host's own address named once though server_clients repeats it
    assert lines["IPAddressAllow"] == ["localhost 10.0.0.11 fd00::11 192.168.10.0/24"]


def test_without_clients_the_allow_list_is_the_loopback_and_the_hosts_own_addresses():
    assert unit_of(deployment())["IPAddressAllow"] == ["localhost 10.0.0.11 fd00::11"]
    assert unit_of(deployment(), UnitHost())["IPAddressAllow"] == ["localhost"]


@pytest.mark.parametrize(
    "version, absent",
    [(252, set()), (248, set()), (247, {"PrivateIPC"}), (246, {"PrivateIPC", "ProtectProc", "ProcSubset"})],
)
def test_a_property_newer_than_the_hosts_systemd_is_left_out(version, absent):
    lines = unit_of(deployment(), UnitHost(version, ()))
    assert {name for name in sandbox.SINCE if name not in lines} == absent
    assert {name for name, _ in sandbox.for_systemd(version)} == {name for name, _ in sandbox.PROPERTIES} - absent


def test_the_release_record_digests_the_unit_the_host_gets():
    d = deployment()
    unit = server_files(d, d.servers["baseline"], "/opt/v", HOST)[0]
    assert release(d, "/opt/v", "/opt/v/lib/site", host=HOST).files[unit.path] == unit.sha256
    assert release(d, "/opt/v", "/opt/v/lib/site").files[unit.path] != unit.sha256


@pytest.mark.parametrize("value", ["10.0.0.1/24", "any", "10.0.0.0/33", "localhost", "10.0.0.0/24\nIPAddressAllow=any"])
def test_server_clients_are_networks_without_host_bits(value):
    with pytest.raises(ConfigError) as error:
        deployment(server_clients=[value])
    assert "server_clients" in str(error.value)


def test_server_clients_are_normalised():
    assert deployment(server_clients=["10.1.0.0/16", "fd00::1"]).data.server_clients == ["10.1.0.0/16", "fd00::1/128"]


def test_an_open_bind_without_clients_is_warned_about_naming_the_key():
    d = deployment()  # group_data/servers.yml binds every configuration to 0.0.0.0
    warnings = client_warnings(d)
    assert [w.key for w in warnings] == [f"servers.{name}.host" for name in d.servers]
    assert all("server_clients" in w.fix and w.value == "0.0.0.0" for w in warnings)
    assert client_warnings(deployment(server_clients=["192.168.10.0/24"])) == []


def test_a_replicas_unit_allows_its_router_and_the_routers_unit_its_workers():
    """The replica set's router is a client of every member (deploy/context.py unit_host: peers);
    the router's own unit reaches the workers by address (a worker by name cannot be listed)."""
    from sglang_pve.config.replica_set import ReplicaSet
    from sglang_pve.deploy.render import router_files

    d = deployment(server_clients=["192.168.10.0/24"])
    member = UnitHost(252, ("10.0.0.12",), peers=("10.0.0.14",))
    assert unit_of(d, member)["IPAddressAllow"] == ["localhost 10.0.0.12 10.0.0.14 192.168.10.0/24"]
    replica_set = ReplicaSet.model_validate({"members": ["sglang2", "sglang3"], "router": {"host": "router1"}})
    workers = ["http://10.0.0.12:8000", "http://[fd00::13]:8000", "http://replica-by-name:8000"]
    unit = router_files(d, "kimi", replica_set, "/opt/rv", workers, UnitHost(252, ("10.0.0.14",)))[0].content
    lines = service(unit)
    assert lines["IPAddressAllow"] == ["localhost 10.0.0.14 10.0.0.12 fd00::13 192.168.10.0/24"]
    assert lines["IPAddressDeny"] == ["any"] and lines["ProtectProc"] == ["invisible"]


def test_a_host_whose_systemd_cannot_filter_ip_traffic_is_warned_about():
    from sglang_pve.deploy.preflight.auth import ip_filter_warnings

    (warning,) = ip_filter_warnings(UnitHost(252, ("10.0.0.21",), ip_filter=False))
    assert warning.key == "IPAddressDeny" and "unprivileged container" in warning.message
    assert "Proxmox firewall" in warning.fix
    assert ip_filter_warnings(UnitHost(252, (), ip_filter=True)) == ip_filter_warnings(UnitHost()) == []
