"""The entry point pve1's unit runs: `python3 -m lab.pve serve ...` in its own process, with a
root-only credentials file, answering a proxmoxer client over verified TLS."""

import json
import os
import socket
import subprocess
import sys

from proxmoxer import ProxmoxAPI

from lab.pve.testing import PASSWORD, require_schema, self_signed_cert


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(tmp_path, credentials_mode: int):
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({"users": {"root@pam": {"password": PASSWORD}}}))
    os.chmod(creds, credentials_mode)
    cert, key = self_signed_cert(tmp_path)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "lab.pve",
        "serve",
        "--version",
        "8",
        "--node",
        "pve1",
        "--state-root",
        str(tmp_path / "etc-pve"),
        "--cert",
        str(cert),
        "--key",
        str(key),
        "--credentials",
        str(creds),
        "--request-log",
        str(tmp_path / "requests.jsonl"),
        "--backend",
        "dir",
        "--backend-options",
        json.dumps({"root": str(tmp_path / "vol")}),
        "--listen",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), port, cert


def test_serves_pve8_over_https(tmp_path):
    require_schema(8)
    proc, port, cert = serve(tmp_path, 0o600)
    try:
        assert "PVE 8 API emulator for node pve1" in proc.stdout.readline()
        px = ProxmoxAPI("127.0.0.1", port=port, user="root@pam", password=PASSWORD, verify_ssl=str(cert), timeout=60)
        assert px.version.get()["release"] == "8.4"
        assert px.nodes.get()[0]["node"] == "pve1"
    finally:
        proc.terminate()
        proc.wait(10)
    assert PASSWORD not in (tmp_path / "requests.jsonl").read_text()


def test_refuses_credentials_readable_by_others(tmp_path):
    proc, _, _ = serve(tmp_path, 0o644)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "chmod 600" in out
