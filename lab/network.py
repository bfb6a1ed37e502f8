"""The host-only bridge: containers reach the host at 10.200.0.1 and nothing else (no NAT,
no default route in the containers). A firewall on the bridge (nftables) lets them reach only the
package index port on the host; connections the host opens (SSH, the Proxmox API) still work."""

from pathlib import Path

from lab import layout
from lab.shell import run


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def bridge_up() -> None:
    """Create sgpve-br0 with its address, or repair one a killed run left behind.

    Its MAC address is set, not left to the kernel: a bridge without one takes the lowest of its
    ports' (net/bridge br_stp_recalculate_bridge_id), and here every port is an LXC veth whose
    host end LXC numbers fe:xx:.. (lxc src/lxc/network.c setup_private_host_hw_addr, which
    assumes a physical port with a lower address on the bridge; the lab has none). So each
    container that started or stopped could move the host's address on the bridge, and an
    answer a container was sending the host at that moment went to the old one and was lost
    until the container's ARP entry expired (an API call to pve2 got no answer within 30 s in
    CI while three guests started). A set address (addr_assign_type 3) never moves."""
    if not link_exists(layout.BRIDGE):
        run(["ip", "link", "add", layout.BRIDGE, "type", "bridge"])
    run(["ip", "link", "set", layout.BRIDGE, "address", layout.mac_address(layout.BRIDGE_ADDRESS)])
    address = f"{layout.BRIDGE_ADDRESS}/{layout.PREFIX_LENGTH}"
    run(["ip", "address", "replace", address, "dev", layout.BRIDGE])
    run(["ip", "link", "set", layout.BRIDGE, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "delete", name])


def bridge_down() -> None:
    delete_link(layout.BRIDGE)


FIREWALL_TABLE = f"sgpve_lab{layout.SLOT}"  # one table per lab slot, removed by `lab down`


def firewall_rules() -> str:
    """nft script: from the bridge, only replies and the package index reach the host; nothing is
    routed off the bridge (container to container on the bridge stays open)."""
    bridge = layout.BRIDGE
    return f"""table inet {FIREWALL_TABLE} {{
    chain input {{
        type filter hook input priority 0; policy accept;
        iifname "{bridge}" ct state established,related accept
        iifname "{bridge}" ip daddr {layout.BRIDGE_ADDRESS} tcp dport {layout.INDEX_PORT} accept
        iifname "{bridge}" counter drop
    }}
    chain forward {{
        type filter hook forward priority 0; policy accept;
        iifname "{bridge}" oifname != "{bridge}" counter drop
    }}
}}
"""


def firewall_down() -> None:
    if run(["nft", "list", "table", "inet", FIREWALL_TABLE], check=False).returncode == 0:
        run(["nft", "delete", "table", "inet", FIREWALL_TABLE])


def firewall_up() -> None:
    """(Re)load this slot's table atomically."""
    firewall_down()
    run(["nft", "-f", "-"], input=firewall_rules())
