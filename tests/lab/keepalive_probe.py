"""A deploy file for tests/lab/test_reliability.py: prints the SSH keepalive interval of every
transport under this host's connection, target first (paramiko/packet.py Packetizer.set_keepalive)."""

from pyinfra import host

client = host.connector.client
transport, intervals = client.get_transport() if client else None, []
while transport is not None:
    intervals.append(transport.packetizer._Packetizer__keepalive_interval)
    sock = transport.sock
    transport = sock.get_transport() if hasattr(sock, "get_transport") else None
print("keepalive", host.name, type(host.connector).__name__, intervals)
