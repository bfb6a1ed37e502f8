"""The lab's pyinfra inventory entries, shared by inventory/lab.py (pve1 and sglang1) and
inventory/lab_scale.py (pve1, pve2 and their guests): a node with its API settings, a guest with
its container spec, and the ssh_config that puts each guest behind its own node (ProxyJump), as
in production.

>>> name, data = node_entry(layout.NODES["pve1"], "PASSWORD_ENV")
>>> name, data["proxmox_api"]["host"] == layout.NODE_ADDRESS, data["proxmox_api"]["password_env"]
('@pvenode/pve1', True, 'PASSWORD_ENV')
"""

import json
import os
from pathlib import Path

from lab import layout

PASSWORD_ENV = "SGLANG_PVE_LAB_PVE_PASSWORD"
SSH_CONFIG = layout.KNOWN_HOSTS.with_name("ssh_config")
# The files `lab up` writes that an inventory of the lab reads.
REQUIRED = (
    (layout.PVE_CREDENTIALS, "the node's API credentials"),
    (layout.SSH_KEY, "the lab's client key"),
    (layout.API_KEY, "the servers' api-key (group_data/lab.py)"),
)


def required(nodes: list[layout.LabNode]) -> list[tuple[Path, str]]:
    """(path, what) of every file an inventory over ``nodes`` reads."""
    return [*REQUIRED, *((node.fingerprint, f"{node.name}'s certificate pin") for node in nodes)]


def export_password() -> None:
    """root@pam's password, handed to the API settings through an environment variable of this
    process only, never through host data (which debug-inventory prints); the lab's nodes share it."""
    password = json.loads(layout.PVE_CREDENTIALS.read_text())["users"]["root@pam"]["password"]
    os.environ.setdefault(PASSWORD_ENV, password)


def _ssh() -> dict:
    return dict(layout.inventory_hosts({layout.NODE: layout.NODE_ADDRESS})[0][1])


def write_ssh_config(nodes: list[layout.LabNode], guests: dict[str, str]) -> str:
    """The production shape: each guest (address -> its node's name) behind its node (ProxyJump),
    strict host key checking on both hops; returns the file's path."""
    text = "".join(
        f"Host {node.name} {node.address}\n    HostName {node.address}\n    User root\n"
        f"    IdentityFile {layout.SSH_KEY}\n    UserKnownHostsFile {layout.KNOWN_HOSTS}\n"
        "    StrictHostKeyChecking yes\n\n"
        for node in nodes
    )
    text += "".join(f"Host {ip}\n    ProxyJump {node}\n    ConnectTimeout 10\n\n" for ip, node in guests.items())
    SSH_CONFIG.write_text(text.rstrip("\n") + "\n")
    return str(SSH_CONFIG)


def node_entry(node: layout.LabNode, password_env: str = PASSWORD_ENV) -> tuple[str, dict]:
    """A node of group pve_nodes: SSH as root, its API (pinned to its certificate)."""
    pin = node.fingerprint.read_text().strip() if node.fingerprint.exists() else None
    return (
        f"@pvenode/{node.name}",  # pyinfra's @ssh with a keepalive (sglang_pve/provision/keepalive.py)
        {
            **_ssh(),
            "ssh_hostname": node.address,
            "proxmox_api": {
                "host": node.address,
                "port": layout.API_PORT,
                "user": "root@pam",
                "password_env": password_env,
                "fingerprint": pin,
                "task_timeout_s": 300,
            },
        },
    )


def guest_entry(name: str, node: str, vmid: int, address: str, ssh_config: str, **spec: object) -> tuple[str, dict]:
    """A container host on ``node``: the lab's container spec with ``spec``'s keys over it."""
    return (
        f"@pveguest/{name}",
        {
            **_ssh(),
            "ssh_hostname": address,
            "ssh_config_file": ssh_config,
            "container": {
                "node": node,
                "vmid": vmid,
                "hostname": name,
                "template": layout.TEMPLATE,
                "unprivileged": False,  # the lab's rootfs is a privileged overlay (lab/README.md)
                "cores": 4,
                "memory": 4096,
                "swap": 0,
                "rootfs": {"storage": "local-zfs", "size_gb": 8},
                "net0": {
                    "bridge": "vmbr0",
                    "ip": f"{address}/{layout.PREFIX_LENGTH}",
                    "hwaddr": layout.mac_address(address),
                },
                "features": {"nesting": True},
                "onboot": True,
                "startup": {"order": 1},
                "gpus": "all",
                "passthrough": "devN",
                "mounts": [{"host": path, "path": path} for path in layout.STORAGE_MOUNTS],  # the node's /shared, /data
                "snapshots_keep": 3,
                **spec,
            },
        },
    )
