"""Rolling a container back to one of its Proxmox snapshots (taking them: provision/container.py).

On ZFS, a rollback is refused by Proxmox when the dataset has any newer snapshot, its own or not
(pve-storage ZFSPoolPlugin.pm volume_rollback_is_possible), and its message names none of them; so
the operation lists each dataset's snapshots on the node first (the ZfsSnapshots fact) and refuses
before any write, naming every blocking snapshot, whoever took it, and the fix."""

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, OperationError, operation

from sglang_pve.config.proxmox import ContainerSpec
from sglang_pve.deploy.facts.zfs import ZfsSnapshots
from sglang_pve.provision import snapshot_storage, snapshots
from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.nodes import Node


@operation(is_idempotent=False)
def rolled_back(spec: ContainerSpec, node: Node, snapshot: str | None = None, on_node=None):
    """
    Roll the container back to `snapshot` (default: its newest) and start it again.

    + spec: the container's ContainerSpec
    + node: its node's API (sglang_pve.provision.nodes)
    + snapshot: a snapshot name; None for the newest
    + on_node: the node's pyinfra host, where its ZFS snapshots are listed first (None: not in this
      run, so only Proxmox's own refusal says that a newer ZFS snapshot blocks the rollback)

    **Example:**

    .. code:: python

        rolled_back(name="Roll back CT 129", spec=spec, node=node, snapshot="sgpve-20261130-114809-config",
                    on_node=inventory.get_host("pve1"))
    """
    try:
        names = [s["name"] for s in snapshots.listed(node, spec.vmid)]
    except ProxmoxError as error:
        raise OperationError(str(error)) from None
    target = snapshot or (names[-1] if names else None)
    if target is None or target not in names:
        raise OperationError(
            f"{host.name}: container {spec.vmid} has no snapshot {target!r}"
            + (
                f" (it has: {', '.join(names)}). Fix: --data snapshot=NAME with one of them"
                if names
                else "; the toolkit takes one before every config change"
            )
        )
    try:
        refusal = _zfs_refusal(on_node, node, spec.vmid, target, names) if on_node else None
    except ProxmoxError as error:
        raise OperationError(str(error)) from None
    if refusal:
        raise OperationError(f"{host.name}: container {spec.vmid} cannot be rolled back to {target}: {refusal}")
    if state.config.DIFF:
        newer = names[names.index(target) + 1 :]
        logger.info(
            f"{host.print_prefix}Will roll back container {spec.vmid} to {target}"
            + (f" (newer snapshots: {', '.join(newer)})" if newer else "")
        )
    yield FunctionCommand(_rollback, (node, spec.vmid, target), {})


def _zfs_refusal(on_node, node: Node, vmid: int, target: str, names: list[str]) -> str | None:
    """Why ZFS would refuse, from each zfspool dataset's own listing on the node; None when nothing blocks."""
    for volume, dataset in snapshot_storage.zfs_datasets(node, vmid, target):
        listing = on_node.get_fact(ZfsSnapshots, dataset=dataset)
        if listing.error:
            return f"the ZFS snapshots of {dataset} ({volume}) cannot be listed on the node: {listing.error}"
        if target not in listing.names:
            return f"{volume} has no ZFS snapshot {target} ({dataset}@{target}): Proxmox cannot roll it back"
        newer = listing.snapshots[listing.names.index(target) + 1 :]
        if newer:
            ours = [line.split("@", 1)[1] for line in newer if line.split("@", 1)[1] in names]
            foreign = [line for line in newer if line.split("@", 1)[1] not in names]
            return snapshots.zfs_rule(vmid, target, ours, foreign)
    return None


def _rollback(state, host, node: Node, vmid: int, target: str) -> bool:
    try:
        snapshots.rollback(node, vmid, target)
    except ProxmoxError as error:
        host.log_styled(str(error), fg="red", log_func=logger.error)
        return False
    host.log(f"container {vmid} rolled back to {target} and started", logger.info)
    return True
