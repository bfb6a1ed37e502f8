"""The bench's fleet (bench/fleet.py): $SGLANG_PVE_BENCH_CONTAINERS guests (default 1), fleet1..N,
spread over pve1 and pve2 (odd on pve1, even on pve2; pve2 only from 2 guests on), vmids 301..,
addresses .101.. of the lab's subnet. Each serves the scale lab's replica configuration on GPUs 0-1
of its node, shared (gpus_shared: the simulator's GPUs hold no real memory), so any count fits.

    SGLANG_PVE_BENCH_CONTAINERS=4 pyinfra -y bench/fleet_inventory.py deploy.py
"""

import os

from lab import inventory, layout

_COUNT = int(os.environ.get("SGLANG_PVE_BENCH_CONTAINERS", "1"))
_NODES = [layout.NODES[name] for name in (["pve1", "pve2"] if _COUNT > 1 else ["pve1"])]
_GUESTS = {
    f"fleet{i}": (_NODES[(i - 1) % len(_NODES)].name, 300 + i, f"{layout.SUBNET}.{100 + i}")
    for i in range(1, _COUNT + 1)
}

inventory.export_password()
_SSH_CONFIG = inventory.write_ssh_config(_NODES, {address: node for node, _, address in _GUESTS.values()})
pve_nodes = [inventory.node_entry(node) for node in _NODES]
sglang_hosts = [
    (
        entry[0],
        {**entry[1], "servers_file": "group_data/scale/replica.yml"},
    )
    for entry in (
        inventory.guest_entry(name, node, vmid, address, _SSH_CONFIG, gpus=[0, 1], gpus_shared=True)
        for name, (node, vmid, address) in _GUESTS.items()
    )
]
lab = [name for name, _ in [*pve_nodes, *sglang_hosts]]  # group_data/lab.py applies
