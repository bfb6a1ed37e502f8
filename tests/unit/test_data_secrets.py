"""No secret lives in host data: pyinfra prints host data (debug-inventory), so a connector secret
(ssh_password, ...) or a secret pasted where its source belongs is refused by key, never echoed;
the connectors refuse before debug-inventory prints anything (the real pyinfra CLI, below)."""

import subprocess

import pytest
from pyinfra.api.arguments import all_argument_meta
from pyinfra.connectors.ssh import connector_data_meta

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.config.proxmox import load_api_settings
from sglang_pve.config.ssh import CONNECTOR_SECRETS
from tests.conftest import PROJECT, group_data

CANARY = "canary-connector-5be0a2"  # never printed: asserted on by count only
PYINFRA = str(PROJECT / ".venv" / "bin" / "pyinfra")


def refusal(load, data) -> str:
    with pytest.raises(ConfigError) as caught:
        load(data)
    return str(caught.value)


def test_every_refused_key_is_one_pyinfra_reads():
    """pyinfra 3.10.0: connectors/ssh.py connector_data_meta, api/arguments.py all_argument_meta."""
    assert set(CONNECTOR_SECRETS) <= set(connector_data_meta) | set(all_argument_meta)
    assert "ssh_paramiko_connect_kwargs" in connector_data_meta


@pytest.mark.parametrize("key", [*CONNECTOR_SECRETS, "ssh_paramiko_connect_kwargs"])
def test_a_connector_secret_in_data_is_refused_by_key_never_echoed(key):
    value = {"password": CANARY} if key == "ssh_paramiko_connect_kwargs" else CANARY
    node = {"proxmox_api": {"host": "192.0.2.10", "user": "root@pam", "password_env": "PVE_PASSWORD"}}
    for load, data in (
        (lambda d: load_deployment("sglang1", d, PROJECT), group_data("all")),
        (lambda d: load_api_settings("pve1", d), node),
    ):
        shown = refusal(load, data | {key: value})
        assert CANARY not in shown and f"{key}" in shown and "value not shown" in shown, shown
        assert "Fix: " in shown


def test_connector_secrets_are_reported_with_the_other_problems():
    shown = refusal(
        lambda d: load_deployment("sglang1", d, PROJECT),
        group_data("all") | {"ssh_password": CANARY, "releases_kept": 1},
    )
    assert "(2 problem(s))" in shown and "ssh_password" in shown and "releases_kept" in shown


@pytest.mark.parametrize(
    "secrets",
    [
        {"sglang_secrets": {"api-key": CANARY}},  # the value where its source belongs
        {"sglang_secrets": {"env": {"HF_TOKEN": CANARY}}},
        {"sglang_secrets": {"api-key": {"value": CANARY}}},
        {"sglang_index_credentials": {"idx.example": {"login": "__token__", "password": CANARY}}},
        {"sglang_index_credentials": {"idx.example": CANARY}},
    ],
)
def test_a_secret_pasted_into_a_secret_section_is_not_echoed(secrets):
    shown = refusal(lambda d: load_deployment("sglang1", d, PROJECT), group_data("all") | secrets)
    assert CANARY not in shown and "value not shown" in shown, shown.replace(CANARY, "<canary>")


def debug_inventory(tmp_path, entry: str, *flags: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"pve_nodes = [{entry}]\n")
    return subprocess.run(
        [PYINFRA, *flags, str(inventory), "debug-inventory"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    "entry, flags",
    [
        (f'("@pvenode/pve9", {{"ssh_hostname": "192.0.2.9", "ssh_password": "{CANARY}"}})', ()),
        ('("@pvenode/pve9", {"ssh_hostname": "192.0.2.9"})', ("--ssh-password", CANARY)),  # pyinfra puts it in data
        (f'("@pveguest/g9", {{"sglang_index_url": "https://u:{CANARY}@idx.example/simple/"}})', ()),
    ],
)
def test_debug_inventory_refuses_before_printing_the_data(tmp_path, entry, flags):
    result = debug_inventory(tmp_path, entry, *flags)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and CANARY not in output, output.replace(CANARY, "<canary>")
    assert "a secret in host data" in output or "holds credentials" in output
    assert "--> Data:" not in output  # pyinfra_cli/prints.py print_inventory never ran


def test_every_host_s_secrets_are_reported_at_once(tmp_path):
    nodes = f'("@pvenode/pve8", {{"ssh_password": "{CANARY}"}}), ("@pvenode/pve9", {{"_sudo_password": "{CANARY}"}})'
    result = debug_inventory(tmp_path, nodes)
    assert result.returncode != 0 and CANARY not in result.stderr
    assert "pve8: ssh_password = <hidden>" in result.stderr and "pve9: _sudo_password = <hidden>" in result.stderr


def test_debug_inventory_still_prints_data_without_secrets(tmp_path):
    result = debug_inventory(tmp_path, '("@pvenode/pve9", {"ssh_hostname": "192.0.2.9"})')
    assert result.returncode == 0 and "--> Data:" in result.stderr and "192.0.2.9" in result.stderr
