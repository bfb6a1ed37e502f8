"""root@pam with two-factor authentication, as pve-access-control answers it
(src/PVE/API2/AccessControl.pm create_ticket_do: NeedTFA and a half ticket; pve-manager
PVE/HTTPServer.pm auth_handler: no call accepts it) and as proxmoxer's ticket auth meets it
(backends/https.py _get_new_tokens: the tfa-challenge round with otp); the toolkit says so at
login, with the fix, instead of a bare 401 at the next call."""

import time

import pytest
import requests
from proxmoxer import AuthenticationError

from lab.pve.auth import totp
from lab.pve.testing import PASSWORD, EmulatedNode
from sglang_pve.config.proxmox import load_api_settings
from sglang_pve.provision.client import ProxmoxError, connect
from sglang_pve.provision.credentials import Credential

SECRET = "JBSWY3DPEHPK3PXP"


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve"), totp_secret=SECRET) as node:
        yield node


def url(pve, path):
    return f"https://127.0.0.1:{pve.port}/api2/json{path}"


def test_totp_is_rfc_6238():
    """RFC 6238 appendix B, SHA1, its 20-byte key, reduced to 6 digits."""
    key = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"  # base32 of "12345678901234567890"
    assert [totp(key, t) for t in (59, 1111111109, 1234567890, 2000000000)] == [
        "287082",
        "081804",
        "005924",
        "279037",
    ]


def test_the_password_alone_gets_a_half_ticket_no_call_accepts(pve):
    login = requests.post(
        url(pve, "/access/ticket"), verify=str(pve.cert), data={"username": "root@pam", "password": PASSWORD}
    )
    data = login.json()["data"]
    assert login.status_code == 200 and data["NeedTFA"] == 1 and "cap" not in data
    assert data["ticket"].startswith('PVE:!tfa!{"totp"%3Atrue}:')
    r = requests.get(url(pve, "/nodes"), cookies={"PVEAuthCookie": data["ticket"]}, verify=str(pve.cert))
    assert (r.status_code, r.reason) == (401, "Authentication failed!")
    second = requests.post(
        url(pve, "/access/ticket"),
        verify=str(pve.cert),
        data={"username": "root@pam", "tfa-challenge": data["ticket"], "password": f"totp:{totp(SECRET, time.time())}"},
    ).json()["data"]
    assert "NeedTFA" not in second and second["ticket"].startswith("PVE:root@pam:")
    assert requests.get(url(pve, "/nodes"), cookies={"PVEAuthCookie": second["ticket"]}, verify=str(pve.cert)).ok


def test_proxmoxer_passes_with_the_code_and_fails_without(pve):
    assert pve.client(otp=totp(SECRET, time.time())).version.get()["release"] == "9.1"
    with pytest.raises(AuthenticationError, match="missing Two Factor Authentication"):
        pve.client()
    with pytest.raises(AuthenticationError):
        pve.client(otp="000000" if totp(SECRET, time.time()) != "000000" else "111111")


def test_the_toolkit_says_tfa_at_login_with_the_fix(pve):
    api = load_api_settings(
        "pve1", {"proxmox_api": {"host": "127.0.0.1", "port": pve.port, "ca_file": str(pve.cert), "password_env": "P"}}
    )
    with pytest.raises(ProxmoxError) as caught:
        connect(api, Credential("root@pam", None, PASSWORD, "environment variable P"))
    message = str(caught.value)
    assert message.startswith("POST /access/ticket: root@pam has two-factor authentication")
    assert "Fix: use an API token (pveum user token add root@pam deploy --privsep 0" in message
    assert "container.passthrough: raw" in message and PASSWORD not in message
    assert [r["path"] for r in pve.requests()][-1] == "/access/ticket"  # nothing after the login
