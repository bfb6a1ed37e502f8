"""Every path, name and address of the local lab, in one place.

The state dir is ``$SGLANG_PVE_LAB_DIR`` (default /var/lib/sglang-pve-lab). Several labs can run
side by side on one machine (parallel test sessions): ``$SGLANG_PVE_LAB_SLOT=N`` (1..9) gives lab N
its own state dir (``<state dir>-slotN``), bridge, subnet 10.(200+N).0.0/24 and veth names, and
shares slot 0's caches (rootfs, wheels) and client key. inventory/lab.py builds its inventory
from here:

>>> inventory_hosts()[0][0], inventory_hosts()[0][1]["ssh_hostname"] == f"{SUBNET}.11"
('sglang1', True)
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(os.environ.get("SGLANG_PVE_LAB_DIR", "/var/lib/sglang-pve-lab"))
SLOT = int(os.environ.get("SGLANG_PVE_LAB_SLOT", "0"))
if not 0 <= SLOT <= 9:
    raise ValueError(f"SGLANG_PVE_LAB_SLOT={SLOT}: must be 0..9")
LAB_DIR = BASE_DIR.with_name(f"{BASE_DIR.name}-slot{SLOT}") if SLOT else BASE_DIR

# Tracked sources the lab installs.
SOURCE_DIR = Path(__file__).resolve().parent
SIM_DIR = SOURCE_DIR / "sglang_sim"  # the SGLang simulator, served as the `sglang` wheel
MODELS_SOURCE_DIR = SOURCE_DIR / "models"  # storage/<mount>/... mirrored into STORAGE_DIR

# State, kept across `down`.
CACHE_DIR = BASE_DIR / "cache"  # debootstrapped rootfs, built and downloaded wheels (all slots)
SSH_KEY_DIR = BASE_DIR / "ssh"
SSH_KEY = SSH_KEY_DIR / "id_ed25519"  # the lab's client key; the .pub is in every container
KNOWN_HOSTS = LAB_DIR / "ssh" / "known_hosts"
STORAGE_DIR = LAB_DIR / "storage"  # stands in for the Proxmox host's /shared and /data
STORAGE_MOUNTS = {"/shared": STORAGE_DIR / "shared", "/data": STORAGE_DIR / "data"}

# Runtime, removed by `down`.
RUN_DIR = LAB_DIR / "run"  # pid files
LOG_DIR = LAB_DIR / "log"
LXC_PATH = LAB_DIR / "lxc"  # the lab's own lxcpath (lxc-* -P)
DEV_DIR = LAB_DIR / "dev"  # fake NVIDIA device nodes
INDEX_DIR = LAB_DIR / "index"  # PEP 503 simple index served over HTTP
LXCFS_DIR = LAB_DIR / "lxcfs"  # lxcfs mount: per-container /proc/uptime etc.
NODE_DIR = LAB_DIR / "node"  # what pve1 binds: its /etc/pve, /proc files, the emulator's code
VOLUMES_DIR = LAB_DIR / "volumes"  # the node's storage volumes (guest root filesystems, mpN)
GUESTD_DIR = RUN_DIR / "guestd"  # guestd's socket, bound into pve1 at NODE_GUESTD_DIR
GUESTD_SOCKET = GUESTD_DIR / "guestd.sock"
NODE_GUESTD_DIR = "/run/pve-lab"

# The node's TLS certificate and API credentials, kept across `down` (root-only files).
PVE_DIR = LAB_DIR / "pve"
PVE_CA = PVE_DIR / "pve-root-ca.pem"  # verify the API against this CA ...
PVE_CERT = PVE_DIR / "pve-ssl.pem"
PVE_FINGERPRINT = PVE_DIR / "pve-ssl.fingerprint"  # ... or pin this SHA-256 (AA:BB:...)
PVE_CREDENTIALS = PVE_DIR / "credentials.json"  # root@pam password and an API token, 0600
# The lab's SGLang api-key (0600, kept across `down`): group_data/lab.py names it as the
# api-key secret source, so the demo's server answers 401 to a client without it.
API_KEY = LAB_DIR / "secrets" / "api-key"
# The emulator's request log and fault rules (lab/pve/README.md), as the lab host sees them.
PVE_REQUEST_LOG = NODE_DIR / "log" / "requests.jsonl"
PVE_FAULTS = NODE_DIR / "etc-pve" / "emulator-faults.json"

# Network: a host-only bridge, no NAT; containers reach only the bridge.
BRIDGE = f"sgpve-br{SLOT}"
SUBNET = f"10.{200 + SLOT}.0"
BRIDGE_ADDRESS = f"{SUBNET}.1"
PREFIX_LENGTH = 24

# The Proxmox node: a system container holding /etc/pve, the API emulator, pct and the fake GPUs.
NODE = "pve1"
NODE_ADDRESS = f"{SUBNET}.2"
API_PORT = 8006
PVE_VERSION = int(os.environ.get("SGLANG_PVE_LAB_PVE_VERSION", "9"))  # the emulated PVE (8 or 9)
# The node's one container template (storage `local`); guestd unpacks it as the cached rootfs.
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
# The one switch of the transition to provisioning: True while `lab up` creates sglang1 itself
# (beside pve1); False now that the deploy creates it through pve1's API (tasks/containers.py,
# inventory/lab.py; tests/lab/conftest.py provisions it for the tests).
LAB_CREATES_SGLANG1 = False
SGLANG_HOSTS = {"sglang1": f"{SUBNET}.11"}
SGLANG_VMID = 129  # the default lab's guest (inventory/lab.py); the scale lab's sglang1 is another one
# The system containers `lab up` creates and boots directly (guests of pve1 are not among them).
HOSTS = {NODE: NODE_ADDRESS, **(SGLANG_HOSTS if LAB_CREATES_SGLANG1 else {})}
INDEX_PORT = 8100
INDEX_URL = f"http://{BRIDGE_ADDRESS}:{INDEX_PORT}/simple/"
# The uv the index serves: the deploy's pin, read from its one source (a requirement with the
# wheels' sha256; the lab reads the file, it imports none of the controller's code).
UV_REQUIREMENT = Path(__file__).resolve().parent.parent / "sglang_pve/config/uv-requirement.txt"
UV_VERSION = re.search(r"^uv==(\S+)", UV_REQUIREMENT.read_text(), re.MULTILINE)[1]  # type: ignore[index]
# SGLang's router as the toolkit pins it (its one source): the lab's index serves the real wheel.
ROUTER_REQUIREMENT = UV_REQUIREMENT.with_name("router-requirement.txt")

# Nightlies the index serves besides the pinned one (lab/sglang_sim's pyproject version), all built
# from the same simulator tree: only the version differs, plus what each name says (lab/index.py).
BROKEN_NIGHTLY = "0.5.16.dev20260721+g3f2a9c1d7"  # truncated wheel, metadata served apart: pip fails half-way
NEVER_READY_NIGHTLY = "0.5.16.dev20260722+g71be0d4a2"  # a regression: every configuration hangs loading weights
GOOD_NIGHTLY = "0.5.16.dev20260723+gc0ffee123"  # the newest: what `sglang_version: nightly` resolves to

# Fake GPUs: 8 like the production hosts (nvidia-uvm's major is dynamic: lab.gpus.uvm_major()).
GPU_COUNT = 8
# The NVIDIA driver of the node (kernel module and nvidia-smi) and the user-space driver installed
# in the containers; set them apart to see preflight refuse the mismatch.
DRIVER_VERSION = os.environ.get("SGLANG_PVE_LAB_DRIVER_VERSION", "580.95.05")
GUEST_DRIVER_VERSION = os.environ.get("SGLANG_PVE_LAB_GUEST_DRIVER_VERSION", DRIVER_VERSION)


@dataclass(frozen=True)
class LabNode:
    """One Proxmox node of the lab and where its state lives on the lab host. pve1 is the default
    lab's node; pve2 (same kind: its own /etc/pve, API emulator, certificate, guestd, volumes, fake
    GPUs) comes up only with ``lab up --scale`` (the scale lab, inventory/lab_scale.py). The two are
    standalone nodes, not a cluster: each has its own /etc/pve and API; they share the lab's CA and
    root@pam credentials (one client setting per node still names its own certificate pin)."""

    name: str
    address: str
    dir: Path  # what the node binds: its /etc/pve backing, ZFS state, the emulator's log
    volumes_dir: Path  # its storage volumes (guest root filesystems, mpN)
    guestd_dir: Path  # guestd's socket, bound into the node at NODE_GUESTD_DIR
    pve_dir: Path  # its TLS certificate, key and fingerprint

    @property
    def etc_pve(self) -> Path:
        return self.dir / "etc-pve"

    @property
    def zfs_state(self) -> Path:
        return self.dir / "zfs"

    @property
    def guestd_socket(self) -> Path:
        return self.guestd_dir / "guestd.sock"

    @property
    def request_log(self) -> Path:
        return self.dir / "log" / "requests.jsonl"

    @property
    def faults(self) -> Path:
        return self.etc_pve / "emulator-faults.json"

    @property
    def cert(self) -> Path:
        return self.pve_dir / "pve-ssl.pem"

    @property
    def key(self) -> Path:
        return self.pve_dir / "pve-ssl.key"

    @property
    def fingerprint(self) -> Path:
        return self.pve_dir / "pve-ssl.fingerprint"


NODES = {
    node.name: node
    for node in (
        LabNode(NODE, NODE_ADDRESS, NODE_DIR, VOLUMES_DIR, GUESTD_DIR, PVE_DIR),
        LabNode(
            "pve2",
            f"{SUBNET}.3",
            LAB_DIR / "node-pve2",
            LAB_DIR / "volumes-pve2",
            RUN_DIR / "guestd-pve2",
            PVE_DIR / "pve2",
        ),
    )
}
SCALE_NODES = ("pve2",)  # the nodes only `lab up --scale` starts (pve1 is always up)
# The scale lab's guests (inventory/lab_scale.py), created by the deploy through each node's API:
# name -> (node, vmid, address). vmids are unique across the lab's nodes (guestd names a guest's
# LXC container by its vmid in one lxcpath, as a PVE cluster keeps vmids unique cluster-wide).
SCALE_GUESTS = {
    "sglang1": ("pve1", 201, f"{SUBNET}.21"),
    "sglang2": ("pve2", 202, f"{SUBNET}.22"),
    "sglang3": ("pve1", 203, f"{SUBNET}.23"),
    "sglang4": ("pve1", 204, f"{SUBNET}.24"),
    "sglang5": ("pve2", 205, f"{SUBNET}.25"),
    "router1": ("pve2", 210, f"{SUBNET}.30"),
}


def veth_name(host: str) -> str:
    """Host side of the container's veth pair (interface names are at most 15 bytes).

    >>> veth_name("sglang1") == (f"sgpv{SLOT}-sglang1" if SLOT else "sgpve-sglang1")
    True
    """
    return ((f"sgpv{SLOT}-" if SLOT else "sgpve-") + host)[:15]


def cgroup_dirs(name: str) -> dict[str, str]:
    """Where a container's cgroups go in every hierarchy: under the slot's own tree, so labs
    of several slots never share a cgroup name (LXC's default is lxc.payload.<name>).

    >>> cgroup_dirs("pve1")["container"] == f"sgpve{SLOT}.container/pve1"
    True
    """
    return {kind: f"sgpve{SLOT}.{kind}/{name}" for kind in ("monitor", "container")}


def mac_address(ip: str) -> str:
    """A fixed MAC derived from the IP: a random one per boot leaves a stale ARP entry.

    >>> mac_address("10.200.0.11")
    '02:00:0a:c8:00:0b'
    """
    return "02:00:" + ":".join(f"{int(octet):02x}" for octet in ip.split("."))


def inventory_hosts(hosts: dict[str, str] = SGLANG_HOSTS) -> list[tuple[str, dict]]:
    """pyinfra inventory entries for lab containers (default: the SGLang hosts; the node:
    ``inventory_hosts({NODE: NODE_ADDRESS})``), reached as root with the lab key."""
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
        for name, ip in hosts.items()
    ]
