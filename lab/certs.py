"""The node's TLS certificate, made like a Proxmox install makes it: a cluster root CA
(/etc/pve/pve-root-ca.pem, its key in /etc/pve/priv/) that signs the node certificate
(/etc/pve/local/pve-ssl.pem and .key) for the node's name and address.

Generated once by `lab up` and kept under the state dir (PVE_DIR) across `down`, so a client that
pinned the CA or the fingerprint keeps trusting the node. The host side holds the CA, the node
certificate and its SHA-256 fingerprint (the form the PVE GUI shows, AA:BB:...); the keys are
root-only.
"""

import datetime
import hashlib
import ipaddress

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lab import layout
from lab.files import write_file

CA_KEY = layout.PVE_DIR / "pve-root-ca.key"
VALID_DAYS = 3650


def fingerprint(cert_pem: bytes) -> str:
    """SHA-256 of the DER certificate as colon-separated hex pairs (upper case)."""
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return ":".join(f"{byte:02X}" for byte in hashlib.sha256(der).digest())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(subject, issuer, public_key, signing_key, extensions) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Manager CA"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca_current() -> bool:
    return CA_KEY.exists() and layout.PVE_CA.exists()


def _current(node: layout.LabNode) -> bool:
    """The kept node certificate names the node's current address (the slot may differ) and is
    signed by the lab's current CA."""
    if not (_ca_current() and node.key.exists() and node.cert.exists()):
        return False
    cert = x509.load_pem_x509_certificate(node.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(layout.PVE_CA.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return _signed_by(cert, ca) and (ipaddress.ip_address(node.address) in names.get_values_for_type(x509.IPAddress))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _ensure_ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    """The lab's CA (one for every node: pve-cluster's pve-root-ca), made once."""
    if not _ca_current():
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("Proxmox Virtual Environment")
        ca = _certificate(
            ca_name,
            ca_name,
            ca_key.public_key(),
            ca_key,
            [
                (x509.BasicConstraints(ca=True, path_length=None), True),
                (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
            ],
        )
        write_file(CA_KEY, _key_pem(ca_key), 0o600)
        write_file(layout.PVE_CA, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    key = serialization.load_pem_private_key(CA_KEY.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key, x509.load_pem_x509_certificate(layout.PVE_CA.read_bytes()).subject


def ensure_node_certificate(node: layout.LabNode = layout.NODES[layout.NODE]) -> str:
    """Create the CA and the node's certificate unless current ones exist; returns the node
    certificate's fingerprint (also written to the node's fingerprint file)."""
    ca_key, ca_name = _ensure_ca()
    if not _current(node):
        node_key = ec.generate_private_key(ec.SECP256R1())
        names = [
            x509.DNSName(node.name),
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address(node.address)),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        cert = _certificate(
            _name(f"{node.name}.lab"),
            ca_name,
            node_key.public_key(),
            ca_key,
            [
                (x509.BasicConstraints(ca=False, path_length=None), True),
                (x509.SubjectAlternativeName(names), False),
                (x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False),
            ],
        )
        write_file(node.key, _key_pem(node_key), 0o600)
        write_file(node.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    digest = fingerprint(node.cert.read_bytes())
    if not node.fingerprint.exists() or node.fingerprint.read_text() != digest + "\n":
        write_file(node.fingerprint, (digest + "\n").encode(), 0o644)
    return digest


def node_files(node: layout.LabNode = layout.NODES[layout.NODE]) -> dict[str, tuple[bytes, int]]:
    """What pmxcfs holds of it on the node: /etc/pve-relative path -> (content, mode)."""
    return {
        "pve-root-ca.pem": (layout.PVE_CA.read_bytes(), 0o640),
        "priv/pve-root-ca.key": (CA_KEY.read_bytes(), 0o600),
        "local/pve-ssl.pem": (node.cert.read_bytes(), 0o640),
        "local/pve-ssl.key": (node.key.read_bytes(), 0o600),
    }
