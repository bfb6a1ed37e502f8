"""The host-only bridge: containers reach the host at 10.200.0.1 and nothing else (no NAT,
no default route in the containers)."""

from pathlib import Path

from lab import layout
from lab.shell import run


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def bridge_up() -> None:
    """Create sgpve-br0 with its address, or repair one a killed run left behind."""
    if not link_exists(layout.BRIDGE):
        run(["ip", "link", "add", layout.BRIDGE, "type", "bridge"])
    address = f"{layout.BRIDGE_ADDRESS}/{layout.PREFIX_LENGTH}"
    run(["ip", "address", "replace", address, "dev", layout.BRIDGE])
    run(["ip", "link", "set", layout.BRIDGE, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "delete", name])


def bridge_down() -> None:
    delete_link(layout.BRIDGE)
