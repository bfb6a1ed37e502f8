"""Every path, name and address of the local lab, in one place.

The state dir is ``$SGLANG_PVE_LAB_DIR`` (default /var/lib/sglang-pve-lab). inventory/lab.py
builds its inventory from here:

>>> inventory_hosts()[0][0], inventory_hosts()[0][1]["ssh_hostname"]
('sglang1', '10.200.0.11')
"""

import os
from pathlib import Path

LAB_DIR = Path(os.environ.get("SGLANG_PVE_LAB_DIR", "/var/lib/sglang-pve-lab"))

# Tracked sources the lab installs.
SOURCE_DIR = Path(__file__).resolve().parent
SIM_DIR = SOURCE_DIR / "sglang_sim"  # the SGLang simulator, served as the `sglang` wheel
MODELS_SOURCE_DIR = SOURCE_DIR / "models"  # storage/<mount>/... mirrored into STORAGE_DIR

# State, kept across `down`.
CACHE_DIR = LAB_DIR / "cache"  # debootstrapped rootfs, built and downloaded wheels
SSH_DIR = LAB_DIR / "ssh"
SSH_KEY = SSH_DIR / "id_ed25519"  # the lab's client key; the .pub is in every container
KNOWN_HOSTS = SSH_DIR / "known_hosts"
STORAGE_DIR = LAB_DIR / "storage"  # stands in for the Proxmox host's /shared and /data
STORAGE_MOUNTS = {"/shared": STORAGE_DIR / "shared", "/data": STORAGE_DIR / "data"}

# Runtime, removed by `down`.
RUN_DIR = LAB_DIR / "run"  # pid files
LOG_DIR = LAB_DIR / "log"
LXC_PATH = LAB_DIR / "lxc"  # the lab's own lxcpath (lxc-* -P)
DEV_DIR = LAB_DIR / "dev"  # fake NVIDIA device nodes
INDEX_DIR = LAB_DIR / "index"  # PEP 503 simple index served over HTTP
LXCFS_DIR = LAB_DIR / "lxcfs"  # lxcfs mount: per-container /proc/uptime etc.

# Network: a host-only bridge, no NAT; containers reach only the bridge.
BRIDGE = "sgpve-br0"
BRIDGE_ADDRESS = "10.200.0.1"
PREFIX_LENGTH = 24
HOSTS = {"sglang1": "10.200.0.11"}
INDEX_PORT = 8100
INDEX_URL = f"http://{BRIDGE_ADDRESS}:{INDEX_PORT}/simple/"

# Fake GPUs: 8 like the production hosts. nvidia-uvm's major is dynamic on a real host
# (read from /proc/devices); 510 is the lab's stand-in for it.
GPU_COUNT = 8
UVM_MAJOR = 510


def veth_name(host: str) -> str:
    """Host side of the container's veth pair (interface names are at most 15 bytes).

    >>> veth_name("sglang1")
    'sgpve-sglang1'
    """
    return f"sgpve-{host}"[:15]


def mac_address(ip: str) -> str:
    """A fixed MAC derived from the IP: a random one per boot leaves a stale ARP entry.

    >>> mac_address("10.200.0.11")
    '02:00:0a:c8:00:0b'
    """
    return "02:00:" + ":".join(f"{int(octet):02x}" for octet in ip.split("."))


def inventory_hosts() -> list[tuple[str, dict]]:
    """pyinfra inventory entries for the lab's containers, reached as root with the lab key."""
    return [
        (
            name,
            {
                "ssh_hostname": ip,
                "ssh_user": "root",
                "ssh_key": str(SSH_KEY),
                "ssh_known_hosts_file": str(KNOWN_HOSTS),
                "ssh_strict_host_key_checking": "yes",
            },
        )
        for name, ip in HOSTS.items()
    ]
