"""The emulator in-process for unit tests (this project's and the toolkit's): HTTPS on
127.0.0.1 with a throwaway self-signed certificate, DirBackend, fake NVIDIA device nodes.
Controller-side only (it needs `cryptography`, and pytest to skip without the schemas).

    from lab.pve.testing import EmulatedNode
    with EmulatedNode(tmp_path, version=9) as pve:
        px = pve.client()                 # proxmoxer, root@pam with a password (ticket)
        px_token = pve.client(token=True)  # proxmoxer, token root@pam!deploy (privsep 0)
        upid = px.nodes("pve1").lxc.post(vmid=101, ostemplate=pve.TEMPLATE, ...)
        assert pve.wait(upid)["exitstatus"] == "OK"
        assert requestlog.schema_violations(pve.requests()) == []
"""

import datetime
import json
import os
import sys
from pathlib import Path

from . import pmxcfs, requestlog, zfs
from .backend import DirBackend
from .node import Node
from .schema import Schema, schema_file
from .server import Emulator
from .storage import Storages

PASSWORD = "lab-root-password"
TOKEN_ID = "root@pam!deploy"
TOKEN_SECRET = "5f2a9c0e-8a51-4d0c-9d8e-1b2c3d4e5f60"
TEMPLATE_NAME = "debian-12-standard_12.7-1_amd64.tar.zst"


def fake_gpu_devices(uvm_major: int, count: int = 8) -> dict:
    """The node's NVIDIA device nodes as DirBackend's device table; nvidia-uvm's major is the
    caller's (dynamic on a real host: lab.gpus.uvm_major derives it as the kernel would)."""
    devices = {f"/dev/nvidia{i}": ("c", 195, i) for i in range(count)}
    devices.update(
        {
            "/dev/nvidiactl": ("c", 195, 255),
            "/dev/nvidia-uvm": ("c", uvm_major, 0),
            "/dev/nvidia-uvm-tools": ("c", uvm_major, 1),
            "/dev/nvidia-caps": ("-", 0, 0),
        }
    )
    return devices


def _uvm_major() -> int:
    """nvidia-uvm's major as this host's kernel would give it (controller-side only: not in the zipapp's
    import graph, which takes relative imports only)."""
    from lab.gpus import uvm_major

    return uvm_major()


def require_schema(version: int, schema_dir=None) -> Path:
    """The schema file, or a LOUD pytest skip naming the missing path."""
    path = schema_file(version, schema_dir)
    if not path.is_file():
        import pytest

        pytest.skip(
            f"PVE {version} API schema missing: {path} (set SGLANG_PVE_PVE_SCHEMA_DIR or provide ../shared/reference)"
        )
    return path


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 (cryptography, as pve-cluster's pve-ssl.pem)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pve1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("pve1"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "pve-ssl.pem", directory / "pve-ssl.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(key_path, 0o600)
    return cert_path, key_path


class EmulatedNode:
    """A running emulator for node ``pve1`` under ``root`` (a tmp dir); a context manager."""

    NODE = "pve1"
    TEMPLATE = f"local:vztmpl/{TEMPLATE_NAME}"

    def __init__(
        self,
        root,
        version: int = 9,
        schema_dir=None,
        backend=None,
        storages=None,
        privsep_token: bool = False,
        totp_secret: str | None = None,
    ):
        """``totp_secret`` (base32): root@pam has two-factor authentication (auth.py)."""
        require_schema(version, schema_dir)
        self.root = Path(root)
        self.version = version
        self.state_root = self.root / "etc-pve"  # laid out as pmxcfs shows it (pmxcfs.make_layout)
        self.lock_dir = self.root / "run-lock-lxc"  # /run/lock/lxc
        pmxcfs.make_layout(self.state_root, self.NODE)
        self.request_log = self.root / "requests.jsonl"
        self.faults_file = self.root / "faults.json"
        vz = self.root / "var-lib-vz"
        (vz / "template" / "cache").mkdir(parents=True, exist_ok=True)
        (vz / "template" / "cache" / TEMPLATE_NAME).write_bytes(b"not really a tarball\n")
        table = storages or {
            "local": {"type": "dir", "path": str(vz), "content": "vztmpl,iso,backup"},
            "local-lvm": {"type": "lvmthin", "content": "rootdir,images"},
            "local-zfs": {"type": "zfspool", "content": "rootdir,images", "pool": "rpool/data"},
        }
        self.backend = backend or DirBackend(self.root / "volumes", devices=fake_gpu_devices(_uvm_major()))
        self.credentials = {
            "users": {"root@pam": {"password": PASSWORD, **({"totp_secret": totp_secret} if totp_secret else {})}},
            "tokens": {TOKEN_ID: {"secret": TOKEN_SECRET, "privsep": int(privsep_token)}},
        }
        self.zfs_state = self.root / "zfs.json"  # the zfspool datasets' snapshots (lab/pve/zfs.py)
        self.bin_dir = self.root / "bin"  # the node's `zfs` on these datasets, for a test's PATH
        self.bin_dir.mkdir(exist_ok=True)
        (self.bin_dir / "zfs").write_text(
            f"#!{sys.executable}\nimport os, sys\nsys.path.insert(0, {str(Path(__file__).parents[2])!r})\n"
            f"os.environ[{zfs.STATE_ENV!r}] = {str(self.zfs_state)!r}\n"
            "from lab.pve.zfs import main\nsys.exit(main())\n"
        )
        (self.bin_dir / "zfs").chmod(0o755)
        storages = Storages(table, self.zfs_state)
        self.node = Node(self.NODE, version, self.state_root, self.backend, storages, self.lock_dir)
        self.emulator = Emulator(
            self.node, Schema.load(version, schema_dir), self.credentials, self.request_log, self.faults_file
        )
        self.cert, self.key = self_signed_cert(self.root)
        self.server = None

    def __enter__(self):
        self.server = self.emulator.serve_in_thread("127.0.0.1", 0, self.cert, self.key)
        self.port = self.server.server_address[1]
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def client(self, token: bool = False, password: str = PASSWORD, timeout: float = 60, otp: str | None = None):
        """A proxmoxer client as the toolkit makes one (TLS verified against the cert). Its timeout and
        wait's only end a hang: a loaded CI worker can pause the emulator's threads for seconds."""
        from proxmoxer import ProxmoxAPI

        auth = {"token_name": TOKEN_ID.split("!")[1], "token_value": TOKEN_SECRET} if token else {"password": password}
        if otp is not None:
            auth["otp"] = otp
        return ProxmoxAPI(
            "127.0.0.1", port=self.port, user="root@pam", verify_ssl=str(self.cert), timeout=timeout, **auth
        )

    def wait(self, upid: str, timeout: float = 120) -> dict:
        return self.node.tasks.wait(upid, timeout)

    def conf_text(self, vmid: int) -> str:
        return self.node.conf_path(vmid).read_text()

    def faults(self, rules: list) -> None:
        self.faults_file.write_text(json.dumps(rules))

    def requests(self) -> list[dict]:
        return requestlog.read(self.request_log) if self.request_log.exists() else []
