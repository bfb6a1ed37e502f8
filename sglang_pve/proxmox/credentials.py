"""The API secret, read from where the node's settings name it: an environment variable or a file
only its owner can read. The secret itself never appears in a message, a repr or an argv."""

import os
import stat
from dataclasses import dataclass, field

from ..config.errors import ConfigError, Problem
from ..config.proxmox import ApiSettings


@dataclass(frozen=True)
class Credential:
    user: str
    token_name: str | None
    secret: str = field(repr=False)
    source: str  # "environment variable PVE_PASSWORD" / "file /root/.pve-password"


def _from_env(key: str, name: str, environ) -> tuple[str | None, Problem | None]:
    value = environ.get(name, "")
    if not value.strip():
        return None, Problem(f"proxmox_api.{key}", name, "the environment variable is not set (or empty)",
                             f"export {name}=... before running pyinfra (or use a 0600 file instead)")
    return value.strip(), None


def _from_file(key: str, path: str) -> tuple[str | None, Problem | None]:
    try:
        info = os.stat(path)
    except OSError as error:
        return None, Problem(f"proxmox_api.{key}", path, f"cannot read it ({error.strerror})",
                             f"create it with only the secret in it, then chmod 600 {path}")
    if not stat.S_ISREG(info.st_mode):
        return None, Problem(f"proxmox_api.{key}", path, "not a regular file", "point at a file holding only the secret")
    if info.st_mode & 0o077:
        return None, Problem(f"proxmox_api.{key}", path,
                             f"readable by others than its owner (mode {stat.S_IMODE(info.st_mode):04o}): a secret must not be",
                             f"chmod 600 {path}")
    with open(path, encoding="utf-8") as handle:
        value = handle.read().strip()
    if not value:
        return None, Problem(f"proxmox_api.{key}", path, "the file is empty", "write the secret into it")
    return value, None


def read_credential(host_name: str, api: ApiSettings, environ=os.environ) -> Credential:
    """The secret the settings name, or ConfigError naming the variable/file and the fix."""
    key = next(k for k in ("password_env", "password_file", "token_env", "token_file") if getattr(api, k))
    where = getattr(api, key)
    secret, problem = _from_env(key, where, environ) if key.endswith("_env") else _from_file(key, where)
    problems = [problem] if problem else []
    if api.ca_file and not os.access(api.ca_file, os.R_OK):
        problems.append(Problem("proxmox_api.ca_file", api.ca_file, "cannot read it",
                                "copy the node's /etc/pve/pve-root-ca.pem there (or pin its fingerprint instead)"))
    if problems:
        raise ConfigError(host_name, problems)
    source = f"environment variable {where}" if key.endswith("_env") else f"file {where}"
    return Credential(user=api.user, token_name=api.token_name, secret=secret, source=source)
