"""Authentication as PVE does it: POST /access/ticket (user + password) gives a ticket (cookie
PVEAuthCookie) and a CSRFPreventionToken that non-GET requests must send back; API tokens come in
``Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET`` and need no CSRF token.

The credentials file (root-only; its path is an argument) is JSON:

    {"users": {"root@pam": {"password": "..."}},
     "tokens": {"root@pam!deploy": {"secret": "...", "privsep": 0}}}

A token's user is the token id ``root@pam!deploy``, which is NOT ``root@pam`` (notes/proxmox.md
0.3). ``privsep: 1`` gives the token only its own ACLs; the emulator has no ACLs, so such a
token holds no privilege at all (every permission check fails with 403).
"""

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass

from .errors import ApiError

TICKET_LIFETIME_S = 7200  # PVE: tickets are valid for 2 hours


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

    def login(self, username: str, password: str, realm: str | None = None) -> dict:
        """POST /access/ticket; a valid ticket as password renews it."""
        if realm and "@" not in username:
            username = f"{username}@{realm}"
        user = self.credentials["users"].get(username)
        renewed = self._ticket_user(password) if password.startswith("PVE:") else None
        if renewed != username and not (user and hmac.compare_digest(user.get("password", ""), password)):
            raise ApiError("authentication failure", 401)
        stamp = f"{int(time.time()):08X}"
        plain = f"PVE:{username}:{stamp}"
        return {
            "username": username,
            "ticket": f"{plain}::{self._sign(plain)}",
            "CSRFPreventionToken": f"{stamp}:{self._sign(stamp + ':' + username)}",
            "cap": {},
        }

    def _ticket_user(self, ticket: str) -> str | None:
        m = re.match(r"^(PVE:([^:]+):([0-9A-F]{8}))::(.+)$", ticket)
        if not m or not hmac.compare_digest(self._sign(m[1]), m[4]):
            return None
        if time.time() - int(m[3], 16) > TICKET_LIFETIME_S:
            return None
        return m[2]

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
        user = self._ticket_user(cookie_ticket)
        if user is None:
            raise ApiError("permission denied - invalid PVE ticket", 401)
        if method != "GET":
            self._check_csrf(user, csrf)
        return Identity(user, privileged=user == "root@pam")

    def _token(self, value: str) -> Identity:
        m = re.match(r"^(.*)=(.*)$", value)
        if not m:
            raise ApiError("no tokenid specified", 401)
        tokenid, secret = m[1], m[2]
        token = self.credentials["tokens"].get(tokenid)
        if token is None:
            user, _, name = tokenid.partition("!")
            raise ApiError(f"no such token '{name}' for user '{user}'", 401)
        if not hmac.compare_digest(token.get("secret", ""), secret):
            raise ApiError("invalid token value!", 401)
        owner = tokenid.partition("!")[0]
        return Identity(tokenid, privileged=owner == "root@pam" and not token.get("privsep", 1))


def is_private(path) -> bool:
    """Whether the credentials file is root-only (0600/0400), as it must be."""
    return (os.stat(path).st_mode & 0o077) == 0
