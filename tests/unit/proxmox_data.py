"""Shared provisioning data for the Proxmox unit tests: a node's API settings and a container spec."""

API = {"host": "192.0.2.10", "user": "root@pam", "password_env": "PVE_PASSWORD", "fingerprint": "AB:" * 31 + "CD"}

CONTAINER = {
    "node": "pve1",
    "vmid": 129,
    "hostname": "sglang1",
    "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    "unprivileged": False,
    "cores": 64,
    "memory": 524288,
    "swap": 0,
    "rootfs": {"storage": "local-zfs", "size_gb": 200},
    "net0": {"bridge": "vmbr0", "ip": "10.0.0.129/24", "gw": "10.0.0.1", "hwaddr": "02:00:0A:00:00:81"},
    "features": {"nesting": True},
    "onboot": True,
    "startup": {"order": 2, "up": 30},
    "gpus": "all",
    "mounts": [{"host": "/tank/shared", "path": "/shared"}, {"host": "/tank/data", "path": "/data"}],
}
