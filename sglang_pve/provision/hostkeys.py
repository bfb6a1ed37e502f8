"""Pin a new container's SSH host key, learnt through the trusted node (never on first use), into
the known_hosts file the inventory names for it.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "known_hosts")
>>> key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
>>> pin(path, "10.0.0.129", key + " root@ct")
True
>>> is_pinned(path, "10.0.0.129"), pin(path, "10.0.0.129", key)
(True, False)
"""

import os
import re

import paramiko

from sglang_pve.config.safe import printable
from sglang_pve.config.ssh import hostname_problem


def _one_host(hostname: str) -> str:
    """The model refuses a hostile ssh_hostname (config/ssh.py); this refuses the inventory name a
    host without one falls back to: a newline or a pattern here would pin the key for other hosts."""
    why = hostname_problem(hostname)
    if why:
        raise ValueError(f"{hostname!r} cannot go into a known_hosts file: {why}; set ssh_hostname for it")
    return hostname


def is_pinned(known_hosts: str, hostname: str) -> bool:
    try:
        return paramiko.HostKeys(os.path.expanduser(known_hosts)).lookup(_one_host(hostname)) is not None
    except (OSError, paramiko.SSHException):
        return False


def pin(known_hosts: str, hostname: str, public_key_line: str) -> bool:
    """Make `hostname`'s only entry the given key (``type base64 [comment]``); True when the file changed.
    Other hosts' lines stay as they are; the file is replaced in one rename."""
    key_type, key_data = public_key_line.split()[:2]
    if not re.fullmatch(r"[a-z0-9@.-]{1,64}", key_type) or not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", key_data):
        raise ValueError(f"not an SSH public key line: {printable(public_key_line[:80])!r}")
    entry = f"{_one_host(hostname)} {key_type} {key_data}"
    path = os.path.expanduser(known_hosts)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    others = [line for line in lines if not line.split() or hostname not in line.split()[0].split(",")]
    if [line for line in lines if line not in others] == [entry]:
        return False
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temp = f"{path}.tmp.{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write("\n".join(others + [entry]) + "\n")
    os.chmod(temp, 0o644)
    os.replace(temp, path)
    return True
