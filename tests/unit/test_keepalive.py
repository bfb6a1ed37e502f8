"""SSH keepalive on the connection and on every jump host under it (sglang_pve/provision/keepalive.py),
on real paramiko transports: a ProxyJump target's transport runs over a direct-tcpip channel of its
hop's transport (pyinfra/connectors/sshuserclient/client.py parse_config, pyinfra 3.10)."""

import socket
from types import SimpleNamespace

import paramiko
import pytest
from pyinfra.api.exceptions import ConnectError

from sglang_pve.provision import keepalive
from sglang_pve.provision.connector import GuestConnector


def _interval(transport: paramiko.Transport) -> int:
    return transport.packetizer._Packetizer__keepalive_interval  # paramiko/packet.py Packetizer.set_keepalive


@pytest.fixture
def chain():
    """A target's transport over a channel of its jump host's transport, each on its own socket pair."""
    sockets = [socket.socketpair() for _ in range(2)]
    hop = paramiko.Transport(sockets[0][0])
    channel = paramiko.Channel(0)
    channel._set_transport(hop)
    target = paramiko.Transport(sockets[1][0])
    target.sock = channel  # what Transport(sock=channel) keeps: the direct-tcpip channel it runs over
    client = paramiko.SSHClient()
    client._transport = target
    yield client, target, hop
    for pair in sockets:
        for end in pair:
            end.close()


def test_the_connection_and_its_jump_host_are_kept_alive(chain):
    client, target, hop = chain
    assert (_interval(target), _interval(hop)) == (0, 0)  # paramiko's default: no keepalive
    assert keepalive.keep_alive(client, 30) == [target, hop]
    assert (_interval(target), _interval(hop)) == (30, 30)


def test_a_direct_connection_has_one_transport(chain):
    client, target, _ = chain
    target.sock = socket.socket()
    try:
        assert keepalive.keep_alive(client, 15) == [target] and _interval(target) == 15
    finally:
        target.sock.close()


def _connector(cls, data: dict, client):
    conn = cls.__new__(cls)
    conn.host = SimpleNamespace(name="pve1", data=SimpleNamespace(dict=lambda: data))
    conn.client = client
    return conn


@pytest.mark.parametrize("cls", [keepalive.NodeConnector, GuestConnector])
def test_the_toolkits_connectors_set_the_host_datas_interval_after_pyinfras_connect(monkeypatch, chain, cls):
    client, target, hop = chain
    monkeypatch.setattr(keepalive.SSHConnector, "_connect", lambda self: None)  # pyinfra's: the client connected
    _connector(cls, {"ssh_keepalive_s": 45}, client)._connect()
    assert (_interval(target), _interval(hop)) == (45, 45)
    _connector(cls, {}, client)._connect()
    assert _interval(target) == 30  # the default (config/ssh.py)


def test_an_invalid_interval_fails_the_connect_naming_the_key(monkeypatch, chain):
    monkeypatch.setattr(keepalive.SSHConnector, "_connect", lambda self: None)
    with pytest.raises(ConnectError, match="pve1: ssh_keepalive_s = 0: .*greater than or equal to 1"):
        _connector(keepalive.NodeConnector, {"ssh_keepalive_s": 0}, chain[0])._connect()


def test_a_node_is_named_without_the_connector_prefix():
    assert list(keepalive.NodeConnector.make_names_data("pve1")) == [("pve1", {}, [])]
