"""``@pveguest/NAME``: SSH to a container this toolkit provisions through its Proxmox node.

pyinfra connects to every inventory host before it prepares any operation, and prepares every
operation before it executes any (pyinfra_cli/cli.py: connect_all, then load_deploy_file per
host, then run_ops). A container that does not exist yet cannot be reached then. This connector
asks the node's API first (one list per node, shared with the provisioning operation): a running
container whose host key is pinned is connected over SSH at once, exactly like ``@ssh``; any other
is left *pending* (connected as far as pyinfra is concerned) and deploy.py gives it one operation,
``guest.deploy_when_provisioned``, that connects and runs the deploy after its node created it.

A container its node restarts in this run (a change that applies only at start) was connected
before the restart, and that session is dead: its next command reconnects first, waiting for its
sshd as a first connection does (pyinfra's SSHConnector keeps one paramiko client per host and
never reconnects by itself: pyinfra/connectors/ssh.py connect, run_shell_command).
"""

import os
import time
from pathlib import Path

from pyinfra import logger
from pyinfra.api.exceptions import ConnectError
from pyinfra.connectors.sshuserclient.client import get_host_keys

from sglang_pve.config import load_deployment
from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.proxmox import load_container
from sglang_pve.provision import hostkeys
from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.keepalive import KeepAliveSSH
from sglang_pve.provision.nodes import node_for

NODE_GROUP = "pve_nodes"
BOOT_WAIT_S = 60
_restarted: set[str] = set()  # inventory names of containers restarted since they were connected


def restarted(host_name: str) -> None:
    """Called by the node's container operation after it restarted this container."""
    _restarted.add(host_name)


def node_host(host, spec):
    """The inventory host of the container's node (ConfigError when it is not one)."""
    node = host.inventory.get_host(spec.node, default=None)
    if node is None or NODE_GROUP not in node.groups:
        raise ConfigError(
            host.name,
            [
                Problem(
                    "container.node",
                    spec.node,
                    f"no host of group {NODE_GROUP} has that name",
                    f"add it to the inventory's {NODE_GROUP} group, or name one that is",
                )
            ],
        )
    return node


def known_hosts_file(host) -> str:
    path = host.data.get("ssh_known_hosts_file")
    if not path:
        raise ConfigError(
            host.name,
            [
                Problem(
                    "ssh_known_hosts_file",
                    None,
                    "a provisioned container's SSH host key "
                    "is pinned there (learnt through its node, never on first use)",
                    "set ssh_known_hosts_file in its host data",
                )
            ],
        )
    return path


def validated_spec(host):
    """The host's container spec, with its deploy data validated too: every problem of the host in
    one report, before the first call to its node."""
    data, problems = host.data.dict(), []
    try:
        spec = load_container(host.name, data)
    except ConfigError as error:
        spec, problems = None, error.problems
    try:
        load_deployment(host.name, data, Path(host.state.cwd or os.getcwd()))
    except ConfigError as error:
        problems += error.problems
    if problems:
        raise ConfigError(host.name, problems)
    return spec


def why_pending(host) -> str | None:
    """Why the container cannot be reached over SSH now, or None when it can."""
    spec = validated_spec(host)
    if spec is None:
        return None
    node = node_for(spec.node, node_host(host, spec).data.dict())
    listed = node.containers().get(spec.vmid)
    if listed is None:
        return f"container {spec.vmid} does not exist on {node.name} yet"
    if listed.get("status") != "running":
        return f"container {spec.vmid} on {node.name} is {listed.get('status')}"
    if not hostkeys.is_pinned(known_hosts_file(host), host.data.get("ssh_hostname") or host.name):
        return f"the SSH host key of container {spec.vmid} is not pinned in {known_hosts_file(host)} yet"
    return None


class GuestConnector(KeepAliveSSH):
    """SSH to a provisioned container (kept alive, with its jump host: keepalive.py); pending (not
    connected) until its node provisioned it."""

    pending: str | None = None

    @staticmethod
    def make_names_data(name):
        yield name, {}, []

    def connect(self) -> None:
        try:
            self.pending = why_pending(self.host)
        except ConfigError:
            # not connected; deploy.py reports every problem when it loads, which stops the whole
            # run before any operation (a failed connect would only drop this host)
            self.pending = "its host data is invalid"
            return
        except ProxmoxError as error:
            raise ConnectError(str(error)) from None
        if self.pending is None:
            super().connect()

    def connect_now(self) -> None:
        """At execute time, after the node's operations ran: the container must be reachable now;
        its node waited for sshd to listen; a slow first login still gets BOOT_WAIT_S."""
        get_host_keys.cache.clear()  # pyinfra memoizes known_hosts per run: the node just pinned a key in it
        _restarted.discard(self.host.name)
        deadline = time.monotonic() + BOOT_WAIT_S
        while True:
            try:
                self.connect()
                break
            except ConnectError:
                if self.client is not None:
                    self.client.close()  # a half-open attempt counts against sshd's MaxStartups
                if self.pending or time.monotonic() > deadline:
                    raise
                time.sleep(2)
        if self.pending:
            raise ConnectError(
                f"{self.host.name}: {self.pending} (see its node's errors above; with --limit, include the node)"
            )

    def _session(self) -> None:
        """Before each command or transfer: refuse while pending; reconnect when the node restarted
        the container since it was connected, or the session died."""
        if self.pending:
            raise ConnectError(f"{self.host.name} cannot run commands yet: {self.pending}")
        transport = self.client.get_transport() if self.client is not None else None
        if self.host.name in _restarted or transport is None or not transport.is_active():
            self.reconnect()

    def reconnect(self) -> None:
        if self.client is not None:
            self.client.close()
        self.disconnect()  # pyinfra's: drops the file-transfer client of the old session
        self.connect_now()
        self.host.log("reconnected: its container restarted", logger.info)

    def run_shell_command(self, command, print_output=False, print_input=False, **arguments):
        self._session()
        return super().run_shell_command(command, print_output=print_output, print_input=print_input, **arguments)

    def put_file(self, *args, **kwargs):
        self._session()
        return super().put_file(*args, **kwargs)

    def get_file(self, *args, **kwargs):
        self._session()
        return super().get_file(*args, **kwargs)
