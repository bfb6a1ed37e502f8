"""The scale lab (python -m lab up --scale): two nodes, pve1 and pve2, each a real system container
with its own API emulator, /etc/pve, pct, fake GPUs and guestd, and six guests that the deploy
creates through each node's API, every guest behind its own node (ProxyJump):

    sglang1 (pve1, GPUs 0-1)  sglang2 (pve2, GPUs 0-1)  sglang3 (pve1, GPUs 2-3)   the replica set
    sglang4 (pve1, GPUs 4-7)  sglang5 (pve2, GPUs 4-7)                            the TP group
    router1 (pve2, no GPU: it runs no SGLang server)                               the router

    python -m lab up --scale && pyinfra -y inventory/lab_scale.py deploy.py      (make demo-scale)

Names, vmids and addresses are lab.layout.SCALE_GUESTS'; the entries lab/inventory.py's, as
inventory/lab.py's. Every host is also in the group "lab" (the variable below), so group_data/lab.py
(the lab's differences from production) applies as to inventory/lab.py's hosts.
"""

from lab import inventory, layout
from sglang_pve.config.inventory_env import InventoryEnv
from sglang_pve.tools.host_files import with_measured

_NODES = [layout.NODES[layout.NODE], *(layout.NODES[name] for name in layout.SCALE_NODES)]
_GPUS = {
    "sglang1": [0, 1],
    "sglang2": [0, 1],
    "sglang3": [2, 3],
    "sglang4": [4, 5, 6, 7],
    "sglang5": [4, 5, 6, 7],
    "router1": [],  # runs only the router (active_server null): no GPU (preflight asks none of it)
}
_SERVERS = {"sglang4": "group_data/scale/tp.yml", "sglang5": "group_data/scale/tp.yml"}  # the rest: the replicas'
_ROUTER = "router1"
# The TP group (sglang_pve/config/tp_group.py): one configuration over both members, rank 0 first;
# named on its members (each checks the group with every member's data).
_TP_GROUPS = {"tp": {"server": "baseline", "members": ["sglang4", "sglang5"], "dist_init_port": 20000}}
# The replica set behind SGLang's router on router1 (config/replica_set.py); every host names it.
REPLICA_SETS = {
    "llama": {
        "members": ["sglang1", "sglang2", "sglang3"],
        "router": {"host": _ROUTER, "options": {"health-check-interval-secs": 2, "log-level": "warn"}},
        "drain_timeout_s": 30,
    }
}

env = InventoryEnv("inventory/lab_scale.py")
for path, what in inventory.required(_NODES):
    env.exists(path, what, "run `python -m lab up --scale` first (with the same SGLANG_PVE_LAB_SLOT)")
env.check()
inventory.export_password()
SSH_CONFIG = inventory.write_ssh_config(_NODES, {address: node for node, _, address in layout.SCALE_GUESTS.values()})

pve_nodes = [inventory.node_entry(node) for node in _NODES]


def _guest(name: str) -> tuple[str, dict]:
    node, vmid, address = layout.SCALE_GUESTS[name]
    entry_name, data = inventory.guest_entry(name, node, vmid, address, SSH_CONFIG, gpus=_GPUS[name])
    data = {**data, "replica_sets": REPLICA_SETS}
    if name == _ROUTER:
        return entry_name, {**data, "active_server": None, "servers_file": "group_data/scale/replica.yml"}
    tp = {"tp_groups": _TP_GROUPS} if name in _TP_GROUPS["tp"]["members"] else {}
    return entry_name, {**data, **tp, "servers_file": _SERVERS.get(name, "group_data/scale/replica.yml")}


sglang_hosts = with_measured([_guest(name) for name in layout.SCALE_GUESTS])
# pyinfra merges a host's data over its groups (pyinfra/api/inventory.py make_hosts_and_groups): a
# group of names only adds the membership
lab = [name for name, _ in [*pve_nodes, *sglang_hosts]]
