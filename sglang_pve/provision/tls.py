"""Trusting a Proxmox node's certificate: a CA file (requests verifies chain and name) or a pinned
SHA-256 fingerprint, which requests cannot do by itself: urllib3 can (``assert_fingerprint``),
so a transport adapter hands the pin to every connection it opens. The pin replaces the CA and
hostname checks (a node's self-signed certificate names the node, not the address used)."""

import requests
from requests.adapters import HTTPAdapter


def normalized_fingerprint(fingerprint: str) -> str:
    """'AB:cd:...' or 'abcd...' -> 'ab:cd:...' (64 hex digits)."""
    digits = fingerprint.replace(":", "").lower()
    return ":".join(digits[i : i + 2] for i in range(0, len(digits), 2))


class PinnedFingerprintAdapter(HTTPAdapter):
    """Accept exactly the certificate whose SHA-256 digest is `fingerprint`."""

    def __init__(self, fingerprint: str, **kwargs):
        self.fingerprint = normalized_fingerprint(fingerprint)
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs):
        kwargs["assert_fingerprint"] = self.fingerprint
        super().init_poolmanager(*args, **kwargs)

    def cert_verify(self, conn, url, verify, cert):
        super().cert_verify(conn, url, False, cert)  # the chain is not checked: the pin is
        conn.assert_fingerprint = self.fingerprint


def trust(session: requests.Session, base_url: str, ca_file: str | None, fingerprint: str | None, verify: bool) -> None:
    """Configure `session` for one of the three trust modes the settings allow."""
    if fingerprint:
        session.verify = False  # no CA check; the adapter checks the pin instead
        session.mount(base_url, PinnedFingerprintAdapter(fingerprint))
    elif ca_file:
        session.verify = ca_file
    else:
        session.verify = verify
