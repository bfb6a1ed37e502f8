"""How the controller reaches a host over SSH: pyinfra's ssh_* keys, validated like every other value.

The toolkit writes ``ssh_hostname`` into the known_hosts file it shares with ssh and the node
(sglang_pve/provision/hostkeys.py pin): that file's first field is a pattern list (OpenSSH
sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT": ``*`` and ``?`` are wildcards, ``!`` negates, ``,``
separates, ``[host]:port`` names a port, ``@cert-authority``/``@revoked`` are markers, blanks end
the field), so a hostname with any of those, or a newline, would pin the attacker's key for other
hosts. Only a DNS name or an IP address passes:

>>> hostname_problem("10.0.0.129"), hostname_problem("fd00::81"), hostname_problem("sglang1.lab")
(None, None, None)
>>> hostname_problem("* ssh-ed25519")
'not a host name or IP address (letters, digits, - and _ in dot-separated labels)'

Connector secrets never live in host data (an inventory, group data, ``--data``, or pyinfra's own
``--ssh-password``/``--key-password``, which it puts there: pyinfra_cli/cli.py _set_override_data):
pyinfra prints host data (``debug-inventory``), so they are refused, by key, value not shown:

>>> [p.key for p in connector_secret_problems({"ssh_password": "x", "ssh_user": "root"})]
['ssh_password']

The files are paths ssh reads (``-F``, UserKnownHostsFile): absolute, ``~/``-relative or relative
to the project, in the safe path alphabet (no blank, which ssh_config would split on).
"""

import re
from collections.abc import Mapping
from ipaddress import ip_address
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sglang_pve.config.errors import HIDDEN, Problem

_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_FILE = re.compile(r"(~/)?[A-Za-z0-9_.,+@=:/-]{1,1024}")
_USER = r"^[a-z_][a-z0-9_-]{0,31}$"


_KEY_LOGIN = (
    "log in with a key: ssh_key (a key file) or ssh-agent (ssh_allow_agent); never a password in data, --data "
    "or --ssh-password (a command line is visible to every local user)"
)
# pyinfra 3.10.0's data keys that carry a secret: pyinfra/connectors/ssh.py ConnectorData
# (ssh_password, ssh_key_password, ssh_paramiko_connect_kwargs: paramiko's password/passphrase),
# pyinfra/api/arguments.py ConnectorArguments (_sudo_password, _su_password: global arguments,
# which pyinfra also reads from host data).
CONNECTOR_SECRETS = {
    "ssh_password": _KEY_LOGIN,
    "ssh_key_password": "load the key into ssh-agent (ssh-add) and set ssh_allow_agent; without a "
    "passphrase in data pyinfra asks for it",
    "_sudo_password": "deploy as root with a key (the toolkit's hosts are reached as root), or let "
    "pyinfra ask (--use-sudo-password)",
    "_su_password": "deploy as root with a key (the toolkit's hosts are reached as root)",
}
_PARAMIKO_SECRETS = ("password", "passphrase")


def connector_secret_problems(data: Mapping[str, object]) -> list[Problem]:
    """A Problem (value hidden) for each connector secret set in host data."""
    problems = [
        Problem(key, HIDDEN, "a secret in host data, which pyinfra prints (debug-inventory); value not shown", fix)
        for key, fix in CONNECTOR_SECRETS.items()
        if data.get(key)
    ]
    paramiko = data.get("ssh_paramiko_connect_kwargs")
    if isinstance(paramiko, Mapping):
        problems += [
            Problem(
                f"ssh_paramiko_connect_kwargs.{key}",
                HIDDEN,
                "a secret in host data, which pyinfra prints (debug-inventory); value not shown",
                _KEY_LOGIN,
            )
            for key in _PARAMIKO_SECRETS
            if paramiko.get(key)
        ]
    return problems


def hostname_problem(value: str) -> str | None:
    """Why `value` is not a host name ssh and known_hosts read as exactly one host, or None."""
    try:
        ip_address(value)
    except ValueError:
        pass
    else:
        return None
    labels = value.split(".")
    if len(value) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return "not a host name or IP address (letters, digits, - and _ in dot-separated labels)"
    return None


def _hostname(value: str) -> str:
    why = hostname_problem(value)
    if why:
        raise ValueError(why)
    return value


def _file(value: str) -> str:
    if not _FILE.fullmatch(value) or ".." in value.split("/") or "//" in value:
        raise ValueError(f"not a path in a safe alphabet: use only {_FILE.pattern}, no .. components and no //")
    return value


SshHostname = Annotated[str, AfterValidator(_hostname)]
SshFile = Annotated[str, AfterValidator(_file)]


class SshAccess(BaseModel):
    """pyinfra's SSH connector keys the toolkit reads or writes (pyinfra-dev/pyinfra
    pyinfra/connectors/ssh.py ConnectorData, commit ed67e748); None: pyinfra's own default."""

    model_config = ConfigDict(extra="ignore", strict=True)
    ssh_hostname: SshHostname | None = None
    ssh_user: str | None = Field(None, pattern=_USER)
    ssh_key: SshFile | None = None
    ssh_known_hosts_file: SshFile | None = None
    ssh_config_file: SshFile | None = None
    # seconds between SSH keepalives on the connection and its jump hosts (provision/keepalive.py):
    # a silent gate wait of an hour must not let a NAT or firewall drop the session
    ssh_keepalive_s: int = Field(30, ge=1, le=3600)
