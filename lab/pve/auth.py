"""Authentication as PVE does it: POST /access/ticket (user + password) gives a ticket (cookie
PVEAuthCookie) and a CSRFPreventionToken that non-GET requests must send back; API tokens come in
``Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET`` and need no CSRF token.

The credentials file (root-only; its path is an argument) is JSON:

    {"users": {"root@pam": {"password": "..."}},
     "tokens": {"root@pam!deploy": {"secret": "...", "privsep": 0}}}

A token's user is the token id ``root@pam!deploy``, which is NOT ``root@pam`` (notes/proxmox.md
0.3). ``privsep: 1`` gives the token only its own ACLs; the emulator has no ACLs, so such a
token holds no privilege at all (every permission check fails with 403).

A user with ``"totp_secret": "<base32>"`` has two-factor authentication (TOTP, RFC 6238: 6 digits,
30 s steps, PVE's defaults), as pve-access-control answers it (src/PVE/API2/AccessControl.pm
create_ticket_do, src/PVE/AccessControl.pm authenticate_2nd_new, commit 5ccd07d): the password
alone gets ``NeedTFA: 1`` and a half ticket ``PVE:!tfa!<challenge>:<time>::<sig>`` (signed with
the user name as associated data, so no API call accepts it: 401 "Authentication failed!"); a
second POST with ``tfa-challenge=<half ticket>`` and ``password=totp:<code>`` (or ``otp`` on the
first one) gets the full ticket. pve-manager PVE/HTTPServer.pm auth_handler answers every bad
ticket or token with 401 "Authentication failed!" (the detail goes to its log only).
"""

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import struct
import time
from dataclasses import dataclass

from .errors import ApiError

TICKET_LIFETIME_S = 7200  # PVE: tickets are valid for 2 hours
AUTH_FAILED = "Authentication failed!"
TFA_CHALLENGE = '{"totp":true}'  # pve-rs TfaChallenge as JSON, for a user with TOTP only
TOTP_STEP_S = 30


def totp(secret_b32: str, at: float) -> str:
    """RFC 6238 TOTP (HMAC-SHA1, 6 digits, 30 s), the code an authenticator app shows."""
    key = base64.b32decode(secret_b32.upper() + "=" * (-len(secret_b32) % 8))
    mac = hmac.new(key, struct.pack(">Q", int(at // TOTP_STEP_S)), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    return f"{(struct.unpack('>I', mac[offset : offset + 4])[0] & 0x7FFFFFFF) % 1_000_000:06d}"


def _totp_ok(user: dict, response: str) -> bool:
    """A ``totp:<code>`` response for now, one step either side (clock skew)."""
    secret = user.get("totp_secret")
    if not secret or not response.startswith("totp:"):
        return False
    now = time.time()
    codes = {totp(secret, now + d * TOTP_STEP_S) for d in (-1, 0, 1)}
    return any(hmac.compare_digest(code, response[len("totp:") :]) for code in codes)


@dataclass(frozen=True)
class Identity:
    user: str  # "root@pam", or the token id "root@pam!deploy" for a token
    privileged: bool  # holds every privilege (root@pam, or its token without privsep)

    @property
    def is_root(self) -> bool:
        """PVE's `$authuser eq 'root@pam'`."""
        return self.user == "root@pam"


def load_credentials(path) -> dict:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {"users": data.get("users", {}), "tokens": data.get("tokens", {})}


def secret_values(credentials: dict) -> list[str]:
    """Every secret in the credentials, for masking."""
    values = [u.get("password", "") for u in credentials["users"].values()]
    values += [t.get("secret", "") for t in credentials["tokens"].values()]
    return [v for v in values if v]


class Authenticator:
    def __init__(self, credentials: dict):
        self.credentials = credentials
        self._key = secrets.token_bytes(32)  # per process, like pve-www.key per cluster

    def _sign(self, text: str) -> str:
        mac = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return base64.b64encode(mac).decode().rstrip("=")

    def login(
        self,
        username: str,
        password: str,
        realm: str | None = None,
        otp: str | None = None,
        tfa_challenge: str | None = None,
    ) -> dict:
        """POST /access/ticket; a valid ticket as password renews it."""
        if realm and "@" not in username:
            username = f"{username}@{realm}"
        user = self.credentials["users"].get(username) or {}
        if otp is not None and tfa_challenge is not None:
            raise ApiError("authentication failure", 401)  # "TFA response should be in 'password', ..."
        if tfa_challenge is not None:  # the second factor answers the half ticket's challenge
            if self._ticket_data(tfa_challenge, aad=username) != f"!tfa!{TFA_CHALLENGE}" or not _totp_ok(
                user, password
            ):
                raise ApiError("authentication failure", 401)
            return self._ticket(username)
        renewed = self._ticket_data(password) if password.startswith("PVE:") else None
        if renewed == username:
            return self._ticket(username)
        if not user or not hmac.compare_digest(user.get("password", ""), password):
            raise ApiError("authentication failure", 401)
        if "totp_secret" not in user:
            return self._ticket(username)
        if otp is None:
            return self._ticket(username, tfa=True)
        if not _totp_ok(user, otp):
            raise ApiError("authentication failure", 401)
        return self._ticket(username)

    def _ticket(self, username: str, tfa: bool = False) -> dict:
        """assemble_ticket + assemble_csrf_prevention_token (pve-common src/PVE/Ticket.pm): the
        data uri-escaped for ':' only; a half ticket carries the challenge, signed with the user."""
        stamp = f"{int(time.time()):08X}"
        data = f"!tfa!{TFA_CHALLENGE}" if tfa else username
        plain = f"PVE:{data.replace(':', '%3A')}:{stamp}"
        res = {
            "username": username,
            "ticket": f"{plain}::{self._sign(plain + (':' + username if tfa else ''))}",
            "CSRFPreventionToken": f"{stamp}:{self._sign(stamp + ':' + username)}",
        }
        return dict(res, NeedTFA=1) if tfa else dict(res, cap={})

    def _ticket_data(self, ticket: str, aad: str | None = None) -> str | None:
        """verify_ticket: the ticket's data (a user name, or ``!tfa!...``) or None."""
        m = re.match(r"^(PVE:(\S+):([0-9A-F]{8}))::(.+)$", ticket)
        if not m or not hmac.compare_digest(self._sign(m[1] + (f":{aad}" if aad else "")), m[4]):
            return None
        if time.time() - int(m[3], 16) > TICKET_LIFETIME_S:
            return None
        return m[2].replace("%3A", ":")

    def _check_csrf(self, user: str, token: str | None) -> None:
        m = re.match(r"^([0-9A-F]{8}):(.+)$", token or "")
        if not m or not hmac.compare_digest(self._sign(f"{m[1]}:{user}"), m[2]):
            raise ApiError("Permission denied - invalid csrf token", 401)

    def authenticate(
        self, method: str, cookie_ticket: str | None, csrf: str | None, authorization: str | None
    ) -> Identity:
        """The caller of one request, or ApiError 401 with PVE's message."""
        if authorization and authorization.startswith("PVEAPIToken="):
            return self._token(authorization[len("PVEAPIToken=") :])
        if not cookie_ticket:
            raise ApiError("No ticket", 401)
        user = self._ticket_data(cookie_ticket)
        if user is None or user.startswith("!tfa!"):
            raise ApiError(AUTH_FAILED, 401)
        if method != "GET":
            self._check_csrf(user, csrf)
        return Identity(user, privileged=user == "root@pam")

    def _token(self, value: str) -> Identity:
        m = re.match(r"^(.*)=(.*)$", value)
        token = self.credentials["tokens"].get(m[1]) if m else None
        if token is None or not hmac.compare_digest(token.get("secret", ""), m[2]):
            raise ApiError(AUTH_FAILED, 401)  # the log has "no such token", "invalid token value!"
        tokenid = m[1]
        owner = tokenid.partition("!")[0]
        return Identity(tokenid, privileged=owner == "root@pam" and not token.get("privsep", 1))


def is_private(path) -> bool:
    """Whether the credentials file is root-only (0600/0400), as it must be."""
    return (os.stat(path).st_mode & 0o077) == 0
