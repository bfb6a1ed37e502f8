"""Provisioning data: every problem at once, named with host, key and fix; secrets never shown."""

import os

import pytest

from sglang_pve.config import ConfigError
from sglang_pve.config.proxmox import load_api_settings, load_container
from sglang_pve.provision.credentials import read_credential
from tests.unit.proxmox_data import API, CONTAINER


def problems(error: ConfigError) -> dict[str, str]:
    return {p.key: p.render(error.host) for p in error.problems}


def test_a_valid_node_and_container_load():
    api = load_api_settings("pve1", {"proxmox_api": API})
    assert (api.port, api.user, api.uses_token, api.verify) == (8006, "root@pam", False, True)
    spec = load_container("sglang1", {"container": CONTAINER})
    assert spec.vmid == 129 and spec.passthrough == "devN" and spec.gpus == "all" and spec.snapshots_keep == 5
    assert load_container("other", {}) is None


def test_every_container_problem_is_reported_at_once():
    bad = CONTAINER | {
        "vmid": 99,
        "cores": 0,
        "gpus": [0, 0],
        "passthrough": "lxc",
        "bogus": 1,
        "net0": {"bridge": "vmbr0", "ip": "10.0.0.129"},
        "mounts": [{"host": "relative", "path": "/x"}],
    }
    del bad["unprivileged"]
    with pytest.raises(ConfigError) as caught:
        load_container("sglang1", {"container": bad})
    found = problems(caught.value)
    assert set(found) == {
        "container.vmid",
        "container.cores",
        "container.gpus",
        "container.passthrough",
        "container.bogus",
        "container.net0.ip",
        "container.mounts.0.host",
        "container.unprivileged",
    }
    assert found["container.unprivileged"].startswith(
        "sglang1: container.unprivileged = None: Field required. Fix: add"
    )
    assert "Fix: use one of 'devN' or 'raw'" in found["container.passthrough"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"password_env": None}, "name exactly one secret source"),
        ({"token_env": "PVE_TOKEN"}, "name exactly one secret source"),
        ({"fingerprint": None}, "say how to trust the node's certificate"),
        ({"fingerprint": None, "verify": False, "ca_file": "/etc/pve-ca.pem"}, "verify: false contradicts ca_file"),
        ({"password_env": None, "token_env": "PVE_TOKEN"}, "token_env/token_file go with token_name"),
    ],
)
def test_api_settings_refuse_ambiguous_secrets_and_trust(change, message):
    settings = {k: v for k, v in (API | change).items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        load_api_settings("pve1", {"proxmox_api": settings})
    assert message in str(caught.value)


def test_an_unknown_key_in_the_api_settings_never_shows_its_value():
    with pytest.raises(ConfigError) as caught:
        load_api_settings("pve1", {"proxmox_api": API | {"password": "s3cret-value"}})
    assert "proxmox_api.password" in str(caught.value) and "s3cret-value" not in str(caught.value)


def test_credential_from_environment_and_missing_variable():
    api = load_api_settings("pve1", {"proxmox_api": API})
    credential = read_credential("pve1", api, environ={"PVE_PASSWORD": "hunter22\n"})
    assert credential.secret == "hunter22" and "hunter22" not in repr(credential)
    with pytest.raises(ConfigError) as caught:
        read_credential("pve1", api, environ={})
    assert problems(caught.value)["proxmox_api.password_env"] == (
        "pve1: proxmox_api.password_env = 'PVE_PASSWORD': the environment variable is not set (or empty). "
        "Fix: export PVE_PASSWORD=... before running pyinfra (or use a 0600 file instead)"
    )


def test_credential_file_must_be_private(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("0123-uuid\n")
    api = load_api_settings(
        "pve1",
        {
            "proxmox_api": {k: v for k, v in API.items() if k != "password_env"}
            | {"token_name": "deploy", "token_file": str(secret)}
        },
    )
    os.chmod(secret, 0o640)
    with pytest.raises(ConfigError) as caught:
        read_credential("pve1", api)
    text = str(caught.value)
    assert f"proxmox_api.token_file = '{secret}'" in text and "mode 0640" in text and f"chmod 600 {secret}" in text
    assert "0123-uuid" not in text
    os.chmod(secret, 0o600)
    credential = read_credential("pve1", api)
    assert (credential.token_name, credential.secret, credential.source) == ("deploy", "0123-uuid", f"file {secret}")
