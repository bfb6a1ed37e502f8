"""The client's own mechanics against a real local HTTPS server: fingerprint pinning (the ticket
request included), a CA file, errors that name the call and never the secret, task exit statuses."""

import datetime
import hashlib
import http.server
import json
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sglang_pve.config.proxmox import load_api_settings
from sglang_pve.provision.client import ProxmoxError, connect, task_succeeded, wire
from sglang_pve.provision.credentials import Credential

PASSWORD = "correct-horse-battery"


def self_signed(directory):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pve1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, 64, 2))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    fingerprint = self_signed(directory)
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, data, reason=None):
            body = json.dumps({"data": data}).encode()
            self.send_response(status, reason)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            seen.append(("POST", self.path, body))
            if self.path.endswith("/access/ticket"):
                ok = f"password={PASSWORD}" in body
                return self.reply(
                    200 if ok else 401,
                    {"ticket": "PVE:root@pam:T", "CSRFPreventionToken": "C"} if ok else None,
                    None if ok else "authentication failure",
                )
            if self.path.endswith("/status/start"):
                return self.reply(500, None, "CT 129 already running")
            return self.reply(200, "UPID:pve1:0001:0002:0003:vzstart:129:root@pam:")

        def do_GET(self):
            seen.append(("GET", self.path, self.headers.get("Cookie", "")))
            if self.path.endswith("/moved"):  # a proxy in front of the node, sending the client elsewhere
                self.send_response(307)
                self.send_header("Location", f"https://localhost:{self.server.server_address[1]}/api2/json/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if "/tasks/" in self.path:
                return self.reply(
                    200,
                    [{"n": 1, "t": "starting"}, {"n": 2, "t": "no such bridge vmbr9"}]
                    if self.path.split("?")[0].endswith("/log")
                    else {"status": "stopped", "exitstatus": "no such bridge vmbr9"},
                )
            return self.reply(200, {"cores": 4, "digest": "d"})

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield {"port": httpd.server_address[1], "fingerprint": fingerprint, "ca": str(directory / "cert.pem"), "seen": seen}
    httpd.shutdown()


def settings(server, **trust):
    return load_api_settings(
        "pve1",
        {
            "proxmox_api": {
                "host": "127.0.0.1",
                "port": server["port"],
                "password_env": "PVE_PASSWORD",
                "timeout_s": 5,
                **trust,
            }
        },
    )


def login(server, password=PASSWORD, **trust):
    return connect(
        settings(server, **trust), Credential("root@pam", None, password, "environment variable PVE_PASSWORD")
    )


def test_a_pinned_fingerprint_is_trusted_and_carries_the_ticket(server):
    api = login(server, fingerprint=server["fingerprint"].upper())
    assert api.get("nodes/pve1/lxc/129/config") == {"cores": 4, "digest": "d"}
    assert server["seen"][-1] == ("GET", "/api2/json/nodes/pve1/lxc/129/config", "PVEAuthCookie=PVE:root@pam:T")


def test_a_wrong_fingerprint_fails_before_the_password_is_sent(server):
    before = len(server["seen"])
    with pytest.raises(ProxmoxError) as caught:
        login(server, fingerprint="00:" * 31 + "00")
    message = str(caught.value)
    assert message.startswith(
        f"POST /access/ticket: TLS verification of 127.0.0.1:{server['port']} failed: Fingerprints did not match."
    )
    assert message.endswith(
        "Fix: compare proxmox_api.fingerprint/ca_file with the node's certificate (pvenode cert info)"
    )
    assert PASSWORD not in message
    assert len(server["seen"]) == before  # the server never saw the request


def test_a_ca_file_verifies_the_chain(server):
    assert login(server, ca_file=server["ca"]).get("nodes/pve1/lxc/129/config")["cores"] == 4


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # what verify: false means
def test_verification_off_only_when_said_and_then_with_a_warning(server, caplog):
    with caplog.at_level("WARNING", logger="pyinfra"):
        assert login(server, verify=False).get("nodes/pve1/lxc/129/config")["cores"] == 4
    assert "TLS verification is off (proxmox_api.verify: false)" in caplog.text and PASSWORD not in caplog.text


def test_a_wrong_password_names_the_call_and_user_not_the_password(server):
    with pytest.raises(ProxmoxError) as caught:
        login(server, password="wrong-password-x", fingerprint=server["fingerprint"])
    assert str(caught.value) == "POST /access/ticket: 401 authentication failed for root@pam"


def test_a_redirect_is_not_followed_so_the_ticket_goes_nowhere_else(server):
    api = login(server, fingerprint=server["fingerprint"])
    with pytest.raises(ProxmoxError) as caught:
        api.get("nodes/pve1/moved")
    shown = str(caught.value)
    assert shown.startswith("GET /nodes/pve1/moved: ") and "307 with a redirect to localhost: not followed" in shown
    assert not [entry for entry in server["seen"] if entry[1].endswith("/elsewhere")]  # nothing reached the target


def test_errors_name_method_path_and_proxmox_message(server):
    api = login(server, fingerprint=server["fingerprint"])
    with pytest.raises(ProxmoxError) as caught:
        api.run_task("POST", "nodes/pve1/lxc/129/status/start")
    assert str(caught.value) == "POST /nodes/pve1/lxc/129/status/start: 500 CT 129 already running"


def test_a_failed_task_reports_its_exit_status_and_log(server):
    api = login(server, fingerprint=server["fingerprint"])
    with pytest.raises(ProxmoxError) as caught:
        api.run_task("POST", "nodes/pve1/lxc/129/status/stop")
    assert str(caught.value) == (
        "POST /nodes/pve1/lxc/129/status/stop: task failed: no such bridge vmbr9 "
        "(task log: starting | no such bridge vmbr9)"
    )


def test_a_task_with_warnings_succeeds_and_says_so(server, caplog, monkeypatch):
    api = login(server, fingerprint=server["fingerprint"])
    statuses = iter([{"status": "running"}, {"status": "stopped", "exitstatus": "WARNINGS: 1"}])
    real_get = api.get
    monkeypatch.setattr(
        api, "get", lambda path, **kw: next(statuses) if path.endswith("/status") else real_get(path, **kw)
    )
    monkeypatch.setattr("sglang_pve.provision.client.POLL_INTERVAL_S", 0)
    with caplog.at_level("WARNING", logger="pyinfra"):
        assert api.wait("UPID:pve1:0001:0002:0003:vzstart:129:root@pam:", "POST /x") == "WARNINGS: 1"
    assert "POST /x: task ended with WARNINGS: 1 (task log: starting | no such bridge vmbr9)" in caplog.text


def test_an_unreachable_node_names_the_call():
    closed = {"port": 1, "fingerprint": "00:" * 31 + "00"}
    with pytest.raises(ProxmoxError) as caught:
        login(closed, fingerprint=closed["fingerprint"])
    assert str(caught.value).startswith("POST /access/ticket: node unreachable at 127.0.0.1:1")


def test_booleans_go_on_the_wire_as_1_0_and_task_statuses():
    assert wire({"unprivileged": False, "onboot": True, "cores": 4, "pool": None}) == {
        "unprivileged": 0,
        "onboot": 1,
        "cores": 4,
    }
    assert [task_succeeded(s) for s in ("OK", "WARNINGS: 2", "command 'lxc-start' failed", None)] == [
        True,
        True,
        False,
        False,
    ]
