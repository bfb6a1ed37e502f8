"""Who may talk to a server: one bound beyond the loopback answers anyone who reaches the port,
admin endpoints included, unless SGLang has an API key."""

import ipaddress
from typing import TYPE_CHECKING

from sglang_pve.config import Deployment, Problem

if TYPE_CHECKING:
    from sglang_pve.deploy.facts.unit_host import UnitHost

_LOOPBACK_NAMES = {"localhost"}


def loopback(bind: str | None) -> bool:
    if bind is None or bind in _LOOPBACK_NAMES:  # None: SGLang's own default, 127.0.0.1
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, assume it is reachable


def auth_problems(deployment: Deployment) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings): an open bind without a key is refused unless allow_unauthenticated."""
    if deployment.secrets.api_key:
        return [], []
    open_binds = {name: s.args.host for name, s in deployment.servers.items() if not loopback(s.args.host)}
    if not open_binds:
        return [], []
    found = [
        Problem(
            f"servers.{name}.host",
            bind,
            "binds beyond the loopback without an API key: anyone who reaches "
            "the port may use every endpoint, admin ones included",
            'give sglang_secrets: {"api-key": {"file": "/path/to/0600-file"}} (or {"env": "VARIABLE"}), '
            "bind to 127.0.0.1, or set allow_unauthenticated: true",
        )
        for name, bind in open_binds.items()
    ]
    return ([], found) if deployment.data.allow_unauthenticated else (found, [])


def user_warnings(deployment: Deployment) -> list[Problem]:
    if deployment.data.server_user != "root":
        return []
    return [
        Problem(
            "server_user",
            "root",
            "the servers run as root, unsandboxed: a flaw in SGLang or a model's remote code owns the host",
            'leave server_user at its default ("sglang") unless root is really needed',
        )
    ]


def client_warnings(deployment: Deployment) -> list[Problem]:
    """An open bind with no server_clients: the unit's IP allow list (sandbox.ip_allow) holds only
    the host's own addresses, so where systemd enforces it no other host gets an answer."""
    if deployment.data.server_clients:
        return []
    return [
        Problem(
            f"servers.{name}.host",
            server.args.host,
            "binds beyond the loopback, but server_clients is empty: the unit denies every IP address "
            "but this host's own (IPAddressDeny=any), so clients elsewhere get no answer",
            "name the clients' networks: server_clients = [\"192.168.10.0/24\"] (not the Proxmox node's)",
        )
        for name, server in deployment.servers.items()
        if not loopback(server.args.host)
    ]


def ip_filter_warnings(host: "UnitHost") -> list[Problem]:
    """Where systemd cannot load its cgroup BPF filter (deploy/facts/unit_host.py), the units' IP
    allow lists are not enforced: said once per host, with what does hold."""
    if host.ip_filter is not False:
        return []
    return [
        Problem(
            "IPAddressDeny",
            "any",
            "not enforced on this host: root here is root of a user namespace (an unprivileged container) and "
            "kernel.unprivileged_bpf_disabled is set, so systemd runs the units without their IP filter (the rest "
            "of the sandbox, seccomp and namespaces, holds)",
            "filter the container's traffic on the node (Proxmox firewall), or run it privileged",
        )
    ]
