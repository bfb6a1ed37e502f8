"""The local lab (python -m lab up): node pve1, a real system container running the Proxmox VE API
emulator, provisions sglang1 through its API; the deploy reaches sglang1 through pve1 as jump host
(ssh_config ProxyJump), with strict host key checking on both hops, as in production.

    pyinfra inventory/lab.py deploy.py

Credentials and the TLS pin come from the files `lab up` writes in the lab's state dir
(lab.layout): root@pam's password is handed to the API settings through an environment variable
of this process only, never through host data (which debug-inventory prints).
"""

import json
import os

from lab import layout
from sglang_pve.config.inventory_env import InventoryEnv
from sglang_pve.tools.nccl.measured import with_measured

PASSWORD_ENV = "SGLANG_PVE_LAB_PVE_PASSWORD"
GUEST, GUEST_ADDRESS = next(iter(layout.SGLANG_HOSTS.items()))

env = InventoryEnv("inventory/lab.py")
for path, what in (
    (layout.PVE_CREDENTIALS, "the node's API credentials"),
    (layout.PVE_FINGERPRINT, "the node's certificate pin"),
    (layout.SSH_KEY, "the lab's client key"),
    (layout.API_KEY, "the servers' api-key (group_data/lab.py)"),
):
    env.exists(path, what, "run `python -m lab up` first (with the same SGLANG_PVE_LAB_SLOT)")
env.check()
os.environ.setdefault(PASSWORD_ENV, json.loads(layout.PVE_CREDENTIALS.read_text())["users"]["root@pam"]["password"])

_ssh = dict(layout.inventory_hosts({layout.NODE: layout.NODE_ADDRESS})[0][1])
SSH_CONFIG = layout.KNOWN_HOSTS.with_name("ssh_config")
SSH_CONFIG.write_text(  # the production shape: the guest behind its node (ProxyJump)
    f"Host {layout.NODE} {layout.NODE_ADDRESS}\n    HostName {layout.NODE_ADDRESS}\n    User root\n"
    f"    IdentityFile {layout.SSH_KEY}\n    UserKnownHostsFile {layout.KNOWN_HOSTS}\n    StrictHostKeyChecking yes\n\n"
    f"Host {GUEST_ADDRESS}\n    ProxyJump {layout.NODE}\n    ConnectTimeout 10\n"
)

pve_nodes = [
    (
        f"@pvenode/{layout.NODE}",  # pyinfra's @ssh with a keepalive (sglang_pve/provision/keepalive.py)
        {
            **_ssh,
            "proxmox_api": {
                "host": layout.NODE_ADDRESS,
                "port": layout.API_PORT,
                "user": "root@pam",
                "password_env": PASSWORD_ENV,
                "fingerprint": layout.PVE_FINGERPRINT.read_text().strip(),
                "task_timeout_s": 300,
            },
        },
    )
]

# The file name makes these hosts the group "lab": group_data/lab.py holds what differs from production.
# A profile measured by tasks/nccl_probe.py (group_data/nccl_measured.yml) is host data.
sglang_hosts = with_measured(
    [
        (
            f"@pveguest/{GUEST}",
            {
                **_ssh,
                "ssh_hostname": GUEST_ADDRESS,
                "ssh_config_file": str(SSH_CONFIG),
                "container": {
                    "node": layout.NODE,
                    "vmid": 129,
                    "hostname": GUEST,
                    "template": layout.TEMPLATE,
                    "unprivileged": False,  # the lab's rootfs is a privileged overlay (lab/README.md)
                    "cores": 4,
                    "memory": 4096,
                    "swap": 0,
                    "rootfs": {"storage": "local-zfs", "size_gb": 8},
                    "net0": {
                        "bridge": "vmbr0",
                        "ip": f"{GUEST_ADDRESS}/{layout.PREFIX_LENGTH}",
                        "hwaddr": layout.mac_address(GUEST_ADDRESS),
                    },
                    "features": {"nesting": True},
                    "onboot": True,
                    "startup": {"order": 1},
                    "gpus": "all",
                    "passthrough": "devN",
                    "mounts": [{"host": path, "path": path} for path in layout.STORAGE_MOUNTS],  # pve1's /shared, /data
                    "snapshots_keep": 3,
                },
            },
        )
    ]
)
