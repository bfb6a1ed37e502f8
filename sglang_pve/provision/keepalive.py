"""SSH keepalive on every connection the toolkit opens, and on every hop of a ProxyJump.

A gate wait can be silent for an hour (a 1T model's cold start); a NAT or firewall on the way
drops an idle TCP connection long before that, and the controller's next command finds a dead
session. pyinfra's SSH connector sets a keepalive only from an ssh_config ``ServerAliveInterval``
(pyinfra 3.10 pyinfra/connectors/sshuserclient/client.py: parse_config reads it, SSHClient.connect
calls ``transport.set_keepalive``), and then only on the hosts that file names. This module sets
the host data's ``ssh_keepalive_s`` (config/ssh.py, default 30) on the connection and on each
jump host's connection under it: a ProxyJump target's transport runs over a ``direct-tcpip``
channel of its hop's transport (client.py parse_config: ``sock = c.gateway(...)``), so
``Transport.sock`` leads from each hop to the one before it.

    keep_alive(client, 30)  # -> [the target's transport, its jump host's]
"""

import weakref

import paramiko
from pydantic import ValidationError
from pyinfra.api.exceptions import ConnectError, PyinfraError
from pyinfra.connectors.ssh import SSHConnector

from sglang_pve.config.errors import ConfigError
from sglang_pve.config.indexes import url_credential_problems
from sglang_pve.config.problems import problems_from
from sglang_pve.config.ssh import SshAccess, connector_secret_problems


def keep_alive(client: paramiko.SSHClient, interval_s: int) -> list[paramiko.Transport]:
    """Set `interval_s` on the client's transport and every hop's under it; those transports, target first."""
    done: list[paramiko.Transport] = []
    transport = client.get_transport()
    while transport is not None and transport not in done:
        transport.set_keepalive(interval_s)
        done.append(transport)
        sock = transport.sock
        transport = sock.get_transport() if isinstance(sock, paramiko.Channel) else None
    return done


def interval_s(host) -> int:
    """The host's validated ssh_keepalive_s."""
    try:
        return SshAccess.model_validate(host.data.dict()).ssh_keepalive_s
    except ValidationError as error:
        raise ConnectError(str(ConfigError(host.name, problems_from(error, SshAccess)))) from None


_checked: "weakref.WeakSet" = weakref.WeakSet()  # the runs (pyinfra States) whose data was checked


def refuse_secrets_in_data(state) -> None:
    """Every inventory host's secrets in data, all reported at once, once per run."""
    if state in _checked:
        return
    _checked.add(state)
    errors = []
    for host in state.inventory:
        data = host.data.dict()
        problems = connector_secret_problems(data) + url_credential_problems(data)
        if problems:
            errors.append(str(ConfigError(host.name, problems)))
    if errors:
        raise PyinfraError("\n".join(errors))


class KeepAliveSSH(SSHConnector):
    """pyinfra's SSH connector with a keepalive on the connection and its jump hosts; a secret in
    the host's data (config/ssh.py CONNECTOR_SECRETS, an index URL's user:password@) is refused when pyinfra makes the
    connector (pyinfra 3.10.0 api/state.py State.init -> api/host.py Host.init), which comes before
    debug-inventory prints the data (pyinfra_cli/cli.py) and before any connection."""

    def __init__(self, state, host) -> None:
        refuse_secrets_in_data(state)
        super().__init__(state, host)

    def _connect(self) -> None:
        super()._connect()
        if self.client is not None:
            keep_alive(self.client, interval_s(self.host))


class NodeConnector(KeepAliveSSH):
    """``@pvenode/NAME``: a Proxmox node over SSH, as ``@ssh`` but kept alive; its inventory name is NAME."""

    @staticmethod
    def make_names_data(name):
        yield name, {}, []
