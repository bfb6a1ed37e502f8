"""Authentication like pveproxy: tickets with CSRF tokens, API tokens, 401s, privsep tokens."""

import pytest
import requests
from proxmoxer import AuthenticationError
from proxmoxer.core import ResourceException

from lab.pve.testing import TOKEN_ID, TOKEN_SECRET, EmulatedNode


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:
        yield node


def url(pve, path):
    return f"https://127.0.0.1:{pve.port}/api2/json{path}"


def test_bad_password_and_no_credentials(pve):
    with pytest.raises(AuthenticationError):
        pve.client(password="wrong")
    r = requests.get(url(pve, "/version"), verify=str(pve.cert))
    assert (r.status_code, r.reason, r.json()) == (401, "No ticket", {"data": None})
    for password in ("", "\0", "x"):  # no such user: no password fits
        data = {"username": "nobody@pam", "password": password}
        r = requests.post(url(pve, "/access/ticket"), data=data, verify=str(pve.cert))
        assert (r.status_code, r.reason) == (401, "authentication failure")


def test_ticket_needs_csrf_token_on_writes(pve):
    login = requests.post(
        url(pve, "/access/ticket"),
        verify=str(pve.cert),
        data={"username": "root@pam", "password": pve.credentials["users"]["root@pam"]["password"]},
    ).json()["data"]
    cookies = {"PVEAuthCookie": login["ticket"]}
    assert requests.get(url(pve, "/nodes"), cookies=cookies, verify=str(pve.cert)).ok
    r = requests.post(
        url(pve, "/nodes/pve1/lxc"),
        cookies=cookies,
        verify=str(pve.cert),
        data={"vmid": "180", "ostemplate": pve.TEMPLATE},
    )
    assert (r.status_code, r.reason) == (401, "Permission denied - invalid csrf token")


def test_tokens(pve):
    assert pve.client(token=True).version.get()["release"] == "9.1"
    r = requests.get(
        url(pve, "/version"), verify=str(pve.cert), headers={"Authorization": f"PVEAPIToken={TOKEN_ID}=wrong"}
    )
    # pve-manager PVE/HTTPServer.pm auth_handler: verify_token's reason goes to the log only
    assert (r.status_code, r.reason) == (401, "Authentication failed!")
    assert TOKEN_SECRET not in r.text
    r = requests.get(
        url(pve, "/version"),
        verify=str(pve.cert),
        headers={"Authorization": f"PVEAPIToken=root@pam!nope={TOKEN_SECRET}"},
    )
    assert (r.status_code, r.reason) == (401, "Authentication failed!")
    r = requests.get(url(pve, "/version"), verify=str(pve.cert), cookies={"PVEAuthCookie": "PVE:root@pam:00000000::x"})
    assert (r.status_code, r.reason) == (401, "Authentication failed!")


def test_privsep_token_holds_no_privilege(tmp_path):
    with EmulatedNode(tmp_path, privsep_token=True) as pve:
        with pytest.raises(ResourceException) as e:
            pve.client(token=True).nodes("pve1").lxc(100).config.get()
        assert (e.value.status_code, e.value.content) == (403, "Permission check failed (/vms/100, VM.Audit)")


def test_unknown_path_is_not_implemented(pve):
    with pytest.raises(ResourceException) as e:
        pve.client().nodes("pve1").nosuch.get()
    assert (e.value.status_code, e.value.content) == (501, "Method 'GET /nodes/pve1/nosuch' not implemented")
