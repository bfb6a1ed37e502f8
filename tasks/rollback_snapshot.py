"""The container back to a Proxmox snapshot (config and root filesystem), then started again:
the newest one, or --data snapshot=NAME. Included by tasks/rollback.py; nodes are skipped.

The toolkit takes a snapshot (sgpve-<time>-<reason>) before every run that changes a container's
config. On ZFS storage Proxmox rolls back only to the most recent snapshot; asking for an older
one is refused with the names of the newer ones and what to do.
"""

from pyinfra import host

from sglang_pve.provision.roles import container_node, own_spec
from sglang_pve.provision.snapshot_rollback import rolled_back

spec = own_spec()
if spec is not None:
    rolled_back(
        name=f"Roll back container {spec.vmid}",
        spec=spec,
        node=container_node(spec),
        snapshot=host.data.get("snapshot"),
    )
