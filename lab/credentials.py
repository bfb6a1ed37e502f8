"""The node's API credentials: root@pam's password and an API token of root@pam.

Generated once by `lab up` and kept in PVE_CREDENTIALS (root-only, 0600) across `down`:

    {"user": "root@pam", "password": "...", "token_id": "root@pam!lab", "token_secret": "<uuid>"}

The emulator in pve1 gets the same values in its own root-only file. Nothing prints them.
"""

import json
import os
import secrets
import uuid

from lab import layout

USER = "root@pam"
TOKEN_ID = f"{USER}!lab"


def ensure_credentials() -> dict[str, str]:
    """The lab's credentials, created on first use; the file is kept 0600."""
    path = layout.PVE_CREDENTIALS
    if path.exists():
        path.chmod(0o600)
        return json.loads(path.read_text())
    credentials = {
        "user": USER,
        "password": secrets.token_urlsafe(18),
        "token_id": TOKEN_ID,
        "token_secret": str(uuid.uuid4()),
    }
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(credentials, file)
    path.with_suffix(".tmp").replace(path)
    return credentials
