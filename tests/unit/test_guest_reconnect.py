"""The @pveguest connector reconnects before its next command when its container was restarted by
its node in this run, or its session died (pyinfra's SSHConnector never reconnects by itself:
pyinfra/connectors/ssh.py run_shell_command uses the client it connected once)."""

from types import SimpleNamespace

import pytest
from pyinfra.api.exceptions import ConnectError

from sglang_pve.provision import connector
from sglang_pve.provision.connector import GuestConnector


class Transport:
    def __init__(self, active: bool):
        self.active = active

    def is_active(self) -> bool:
        return self.active


class Client:
    def __init__(self, active: bool = True):
        self.transport, self.closed = Transport(active), False

    def get_transport(self):
        return self.transport

    def close(self):
        self.closed = True


@pytest.fixture
def guest(monkeypatch):
    """A connector whose connect_now hands out a fresh live client and counts the reconnects."""
    conn = GuestConnector.__new__(GuestConnector)
    conn.host = SimpleNamespace(name="sglang1", log=lambda *a, **k: None)
    conn.client, conn.pending, conn.connects = Client(), None, 0

    def connect_now():
        connector._restarted.discard("sglang1")
        conn.client, conn.connects = Client(), conn.connects + 1

    monkeypatch.setattr(conn, "connect_now", connect_now)
    monkeypatch.setattr(conn, "disconnect", lambda: None)
    yield conn
    connector._restarted.clear()


def test_a_live_session_is_kept(guest):
    guest._session()
    assert guest.connects == 0


def test_a_container_its_node_restarted_is_reconnected_once(guest):
    old = guest.client
    connector.restarted("sglang1")
    guest._session()
    guest._session()
    assert guest.connects == 1 and old.closed and guest.client is not old


def test_a_dead_session_is_reconnected(guest):
    guest.client.transport.active = False
    guest._session()
    assert guest.connects == 1


def test_a_pending_container_refuses_commands_without_connecting(guest):
    guest.pending = "container 129 does not exist on pve1 yet"
    with pytest.raises(ConnectError, match="cannot run commands yet: container 129 does not exist"):
        guest._session()
    assert guest.connects == 0
