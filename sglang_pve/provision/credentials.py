"""The API secret, read from where the node's settings name it: an environment variable or a file
only its owner can read. The secret itself never appears in a message, a repr or an argv."""

import os
from dataclasses import dataclass, field

from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.proxmox import ApiSettings
from sglang_pve.config.secrets import from_env, from_file


@dataclass(frozen=True)
class Credential:
    user: str
    token_name: str | None
    secret: str = field(repr=False)
    source: str  # "environment variable PVE_PASSWORD" / "file /root/.pve-password"


def read_credential(host_name: str, api: ApiSettings, environ=os.environ) -> Credential:
    """The secret the settings name, or ConfigError naming the variable/file and the fix."""
    key = next(k for k in ("password_env", "password_file", "token_env", "token_file") if getattr(api, k))
    where = getattr(api, key)
    name = f"proxmox_api.{key}"
    secret, problem = (
        from_env(name, where, environ) if key.endswith("_env") else from_file(name, os.path.expanduser(where))
    )
    problems = [problem] if problem else []
    if api.ca_file and not os.access(api.ca_file, os.R_OK):
        problems.append(
            Problem(
                "proxmox_api.ca_file",
                api.ca_file,
                "cannot read it",
                "copy the node's /etc/pve/pve-root-ca.pem there (or pin its fingerprint instead)",
            )
        )
    if problems:
        raise ConfigError(host_name, problems)
    assert secret is not None  # from_env and from_file give a secret or a problem
    source = f"environment variable {where}" if key.endswith("_env") else f"file {where}"
    return Credential(user=api.user, token_name=api.token_name, secret=secret, source=source)
