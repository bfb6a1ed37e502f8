"""Every value through the model: hostile ssh_* values, mount paths and privileged server groups
are refused naming the key; a secret pasted into a field that names something is never echoed;
the known_hosts file stays one line per host whatever the hostname."""

import pytest

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.config.deployment import PRIVILEGED_GROUPS
from sglang_pve.config.proxmox import load_api_settings, load_container
from sglang_pve.provision import hostkeys
from tests.conftest import PROJECT, group_data
from tests.unit.proxmox_data import API, CONTAINER

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
HOSTILE_HOSTNAMES = [
    "10.0.0.129\n* ssh-ed25519 AAAA",  # a second line: a wildcard entry for every host
    "10.0.0.129 10.0.0.1",  # a space ends the pattern field
    "*",  # wildcard
    "10.0.0.*",
    "?.lab",
    "[10.0.0.129]:2222",  # known_hosts' port syntax
    "10.0.0.129,10.0.0.1",  # a pattern list
    "!10.0.0.1",  # negation
    "@revoked",
    "host\u202e.lab",  # bidi override
    "",
    "-oProxyCommand=x",
]


def deployment_problems(**changes) -> dict[str, str]:
    data = group_data("all") | {"servers_file": "group_data/servers.yml"} | changes
    with pytest.raises(ConfigError) as caught:
        load_deployment("sglang1", data, PROJECT)
    return {p.key: p.render("sglang1") for p in caught.value.problems}


@pytest.mark.parametrize("value", HOSTILE_HOSTNAMES)
def test_a_hostile_ssh_hostname_is_refused_naming_the_key(value):
    assert "ssh_hostname" in deployment_problems(ssh_hostname=value)
    with pytest.raises(ConfigError) as caught:  # a node's too
        load_api_settings("pve1", {"proxmox_api": API, "ssh_hostname": value})
    assert [p.key for p in caught.value.problems] == ["ssh_hostname"]


@pytest.mark.parametrize("value", ["10.0.0.129", "fd00::81", "sglang1", "sglang1.lab.example", "node_1"])
def test_host_names_and_addresses_pass(value):
    data = group_data("all") | {"servers_file": "group_data/servers.yml", "ssh_hostname": value}
    assert load_deployment("sglang1", data, PROJECT).data.ssh_hostname == value


@pytest.mark.parametrize("key", ["ssh_known_hosts_file", "ssh_config_file", "ssh_key"])
@pytest.mark.parametrize("value", ["/a\nb", "/a b", "/a\tb", "/a#b", "/a\\b", "/a/../b", "//a", "~user/x", ""])
def test_hostile_ssh_files_are_refused_naming_the_key_without_the_value(key, value):
    shown = deployment_problems(**{key: value})[key]
    assert "(value not shown)" in shown and (not value.strip("/") or value not in shown)


@pytest.mark.parametrize("value", ["/home/u/.ssh/known_hosts", "~/.ssh/known_hosts", "inventory/ssh_config.example"])
def test_ssh_files_absolute_home_or_project_relative_pass(value):
    data = group_data("all") | {"servers_file": "group_data/servers.yml", "ssh_known_hosts_file": value}
    assert load_deployment("sglang1", data, PROJECT).data.ssh_known_hosts_file == value


HOSTILE_MOUNTS = {
    "tab": "/tank/m\tro",  # a tab turns the next word into the options field: a writable rbind
    "CR": "/tank/m\r",
    "newline": "/tank/m\nlxc.hook.pre-start: /x",
    "backslash": "/tank/m\\040x",  # getmntent's octal escape
    "hash": "/tank/m#x",  # a comment
    "double slash": "//tank",
    "only double slash": "//",
    "root": "/",
    "space": "/tank/m x",
    "comma": "/tank/m,rw",
    "equals": "/tank/m=x",
    "colon": "/tank/m:x",
    "dot-dot": "/tank/../etc",
    "dot": "/tank/./m",
    "relative": "tank",
    "bidi": "/tank/\u202em",
}


@pytest.mark.parametrize("field", ["host", "path"])
@pytest.mark.parametrize("name", list(HOSTILE_MOUNTS))
def test_a_hostile_mount_path_is_refused_naming_the_key(field, name):
    mount = {"host": "/tank/shared", "path": "/shared"} | {field: HOSTILE_MOUNTS[name]}
    with pytest.raises(ConfigError) as caught:
        load_container("sglang1", {"container": CONTAINER | {"mounts": [mount]}})
    assert [p.key for p in caught.value.problems] == [f"container.mounts.0.{field}"]


def test_plain_mount_paths_pass():
    mounts = [{"host": "/tank/models-2026_v1.0", "path": "/shared/m@x+y"}]
    assert load_container("sglang1", {"container": CONTAINER | {"mounts": mounts}}).mounts[0].host.startswith("/tank")


@pytest.mark.parametrize("group", sorted(PRIVILEGED_GROUPS))
def test_a_privileged_server_group_is_refused_naming_the_key_and_the_fix(group):
    shown = deployment_problems(server_groups=["video", group])["server_groups"]
    assert f"{group} is a privileged group" in shown and "remove it from server_groups" in shown


def test_gpu_groups_pass():
    data = group_data("all") | {"servers_file": "group_data/servers.yml", "server_groups": ["video", "render"]}
    assert load_deployment("sglang1", data, PROJECT).data.server_groups == ["video", "render"]


SECRET = "pve-canary-s3cr3t-Passw0rd!"


@pytest.mark.parametrize("field", ["password_env", "password_file"])
def test_a_secret_pasted_into_a_name_field_is_never_echoed(field):
    api = {k: v for k, v in API.items() if k not in ("password_env", "password_file")} | {field: SECRET}
    with pytest.raises(ConfigError) as caught:
        load_api_settings("pve1", {"proxmox_api": api})
    assert SECRET not in str(caught.value) and f"proxmox_api.{field}" in str(caught.value)
    assert "(value not shown)" in str(caught.value)


def test_a_secret_pasted_as_a_secret_source_or_an_env_name_is_never_echoed():
    shown = deployment_problems(sglang_secrets={"api-key": {"env": SECRET}, "env": {SECRET: {"env": "X"}}})
    assert SECRET not in str(shown) and "not a valid environment variable name (value not shown)" in str(shown)
    assert set(shown) == {"sglang_secrets.api-key.env", "sglang_secrets.env"}
    shown = deployment_problems(sglang_secrets={"api-key": {"file": SECRET}})  # not a path: never read, never shown
    assert SECRET not in str(shown) and "not a valid path (value not shown)" in str(shown)


@pytest.mark.parametrize("value", HOSTILE_HOSTNAMES)
def test_known_hosts_stays_one_line_per_host_under_a_hostile_name(tmp_path, value):
    path = str(tmp_path / "known_hosts")
    assert hostkeys.pin(path, "10.0.0.1", KEY)
    with pytest.raises(ValueError, match="cannot go into a known_hosts file"):
        hostkeys.pin(path, value, KEY)
    with pytest.raises(ValueError):
        hostkeys.is_pinned(path, value)
    with pytest.raises(ValueError, match="not an SSH public key line"):
        hostkeys.pin(path, "10.0.0.2", "ssh-ed25519 AAAA,* ssh-rsa")
    assert open(path).read() == f"10.0.0.1 {KEY}\n"
    assert hostkeys.pin(path, "10.0.0.2", KEY) and open(path).read().splitlines() == [
        f"10.0.0.1 {KEY}",
        f"10.0.0.2 {KEY}",
    ]
