"""The request log records every request with its user and the schema's verdict, and never a
secret."""

import pytest
from proxmoxer.core import ResourceException

from lab.pve import requestlog
from lab.pve.testing import PASSWORD, TOKEN_ID, TOKEN_SECRET, EmulatedNode


def test_every_request_logged_secrets_masked(tmp_path):
    with EmulatedNode(tmp_path) as pve:
        pve.client().version.get()
        pve.client(token=True).nodes("pve1").lxc.get()
        with pytest.raises(ResourceException):
            pve.client().nodes("pve1").lxc.post(vmid=190, ostemplate=pve.TEMPLATE, password=PASSWORD, onboot=True)
        entries = pve.requests()
        text = pve.request_log.read_text()
    assert PASSWORD not in text and TOKEN_SECRET not in text
    assert [(e["method"], e["path"], e["user"], e["status"]) for e in entries] == [
        ("POST", "/access/ticket", "root@pam", 200),
        ("GET", "/version", "root@pam", 200),
        ("GET", "/nodes/pve1/lxc", TOKEN_ID, 200),
        ("POST", "/access/ticket", "root@pam", 200),
        ("POST", "/nodes/pve1/lxc", "root@pam", 400),
    ]
    assert entries[0]["params"] == {"username": "root@pam", "password": requestlog.MASK}
    assert entries[-1]["params"]["password"] == requestlog.MASK
    assert requestlog.schema_violations(entries) == [entries[-1]]
    assert entries[-1]["schema_errors"] == {"onboot": "type check ('boolean') failed - got 'True'"}
