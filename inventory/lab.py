"""The local lab (python -m lab up): node pve1, a real system container running the Proxmox VE API
emulator, provisions sglang1 through its API; the deploy reaches sglang1 through pve1 as jump host
(ssh_config ProxyJump), with strict host key checking on both hops, as in production.

    pyinfra inventory/lab.py deploy.py

Credentials and the TLS pin come from the files `lab up` writes in the lab's state dir
(lab.layout): root@pam's password is handed to the API settings through an environment variable
of this process only, never through host data (which debug-inventory prints). The entries are
lab/inventory.py's (inventory/lab_scale.py, the two-node lab, is built from the same).
"""

from lab import inventory, layout
from sglang_pve.config.inventory_env import InventoryEnv
from sglang_pve.tools.host_files import with_measured

GUEST, GUEST_ADDRESS = next(iter(layout.SGLANG_HOSTS.items()))
NODE = layout.NODES[layout.NODE]

env = InventoryEnv("inventory/lab.py")
for path, what in inventory.required([NODE]):
    env.exists(path, what, "run `python -m lab up` first (with the same SGLANG_PVE_LAB_SLOT)")
env.check()
inventory.export_password()
SSH_CONFIG = inventory.write_ssh_config([NODE], {GUEST_ADDRESS: NODE.name})

pve_nodes = [inventory.node_entry(NODE)]

# The file name makes these hosts the group "lab": group_data/lab.py holds what differs from production.
# A profile measured by tasks/nccl_probe.py (group_data/nccl_measured.yml) and a configuration promoted by
# tasks/bench.py (group_data/bench_promoted.yml) are host data (sglang_pve/tools/host_files.py).
sglang_hosts = with_measured([inventory.guest_entry(GUEST, NODE.name, layout.SGLANG_VMID, GUEST_ADDRESS, SSH_CONFIG)])
