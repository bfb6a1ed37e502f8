"""Example production inventory: Proxmox node pve1 provisions LXC container 129 with 8 GPUs and the
model storage, and the deploy reaches the container over SSH through the node (ProxyJump in an
ssh_config), with strict host key checking on both hops. Copy it and put in your own addresses.

    export SGLANG_PVE_SSH_KEY=~/.ssh/id_pve            # root on the node and in its containers (+ .pub)
    export SGLANG_PVE_KNOWN_HOSTS=~/.ssh/known_hosts_pve  # holds the node's host key (ssh-keyscan is NOT
                                                     # verification: compare with the node's console)
    export SGLANG_PVE_SSH_CONFIG=inventory/ssh_config.example
    export PVE_PASSWORD_FILE=~/.config/sglang-pve/pve1.password   # root@pam's password, chmod 600
    export PVE_FINGERPRINT=AA:BB:...                 # on the node: pvenode cert info (SHA-256 of pve-ssl.pem)
    pyinfra inventory/prod.py deploy.py --dry --diff   # review: the container config diff, file diffs
    pyinfra inventory/prod.py deploy.py                # apply: provision, then deploy, in one run

Secrets never live here: files you point at, or the environment. A new container's SSH host key
is learnt through the node and pinned into SGLANG_PVE_KNOWN_HOSTS (never trusted on first use).
"""

from sglang_pve.config.inventory_env import InventoryEnv
from sglang_pve.tools.host_files import with_measured

env = InventoryEnv("inventory/prod.py")
_ssh = {
    "ssh_user": "root",
    "ssh_key": env.file(
        "SGLANG_PVE_SSH_KEY", "~/.ssh/id_ed25519", "the private key that logs in as root on the node and its containers"
    ),
    "ssh_config_file": env.file(
        "SGLANG_PVE_SSH_CONFIG", "inventory/ssh_config.example", "the ssh_config with the ProxyJump through the node"
    ),
    "ssh_known_hosts_file": env.file(
        "SGLANG_PVE_KNOWN_HOSTS", None, "the known_hosts file holding the node's host key"
    ),
    "ssh_strict_host_key_checking": "yes",
}
_api = {
    "host": "192.0.2.10",  # 192.0.2.0/24 is a documentation range: your node's address
    "user": "root@pam",  # devN passthrough needs root@pam itself: an API token cannot set it
    "password_file": env.file("PVE_PASSWORD_FILE", None, "root@pam's password, alone in a chmod 600 file"),
    "fingerprint": env.value(
        "PVE_FINGERPRINT", "the SHA-256 fingerprint of the node's API certificate (pvenode cert info)"
    ),
}
env.check()

pve_nodes = [
    # @pvenode/NAME: pyinfra's @ssh with a keepalive (sglang_pve/provision/keepalive.py); the host is NAME
    ("@pvenode/pve1", {**_ssh, "ssh_hostname": "192.0.2.10", "proxmox_api": _api}),
]

# A profile measured by tasks/nccl_probe.py --data write=1 (group_data/nccl_measured.yml) becomes
# that host's nccl_profile, a configuration promoted by tasks/bench.py --data promote=1
# (group_data/bench_promoted.yml) its active_server; `--data key=...` still wins.
sglang_hosts = with_measured(
    [
        (
            "@pveguest/pve1-sglang",
            {
                **_ssh,
                "ssh_hostname": "192.0.2.101",
                "container": {
                    "node": "pve1",
                    "vmid": 129,
                    "hostname": "pve1-sglang",
                    # + the node's exact NVIDIA user-space driver
                    "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                    "unprivileged": False,  # privileged: host-owned model files readable as-is (notes/proxmox.md 1.4)
                    "cores": 96,
                    "memory": 1572864,
                    "swap": 0,  # MiB: 1.5 TiB for a 1T-parameter INT4 model's host side
                    "rootfs": {"storage": "local-zfs", "size_gb": 500},
                    "net0": {"bridge": "vmbr0", "ip": "192.0.2.101/24", "gw": "192.0.2.1"},
                    "features": {"nesting": True},
                    "onboot": True,
                    "startup": {"order": 2, "up": 60},
                    "gpus": "all",
                    "passthrough": "devN",
                    "mounts": [{"host": "/tank/shared", "path": "/shared"}, {"host": "/tank/data", "path": "/data"}],
                    "snapshots_keep": 5,
                },
            },
        ),
    ]
)
