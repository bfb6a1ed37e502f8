"""The node's API credentials: root@pam's password and an API token of root@pam.

Generated once by `lab up` and kept in PVE_CREDENTIALS (root-only, 0600) across `down`, in the
emulator's format (lab/pve/auth.py); pve1's emulator reads the same file's copy in /etc/pve/priv/:

    {"users": {"root@pam": {"password": "..."}},
     "tokens": {"root@pam!lab": {"secret": "<uuid>", "privsep": 0}}}

Nothing prints them. `lab up` also makes the servers' api-key (ensure_api_key) into layout.API_KEY,
which group_data/lab.py names as a secret source: {"api-key": {"file": API_KEY}}.
"""

import json
import secrets
import uuid

from lab import layout
from lab.files import write_file

USER = "root@pam"
TOKEN_ID = f"{USER}!lab"


def ensure_credentials() -> dict:
    """The lab's credentials, created on first use; the file is kept 0600."""
    path = layout.PVE_CREDENTIALS
    if path.exists():
        path.chmod(0o600)
        return json.loads(path.read_text())
    credentials = {
        "users": {USER: {"password": secrets.token_urlsafe(18)}},
        "tokens": {TOKEN_ID: {"secret": str(uuid.uuid4()), "privsep": 0}},
    }
    write_file(path, json.dumps(credentials).encode(), 0o600)
    return credentials


def ensure_api_key() -> None:
    """The lab's SGLang api-key, created on first use (one line, 0600, parents root-only)."""
    path = layout.API_KEY
    if path.exists():
        path.chmod(0o600)
        return
    write_file(path, (secrets.token_urlsafe(32) + "\n").encode(), 0o600)
