"""Rolling a container back to one of its Proxmox snapshots (taking them: provision/container.py)."""

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, OperationError, operation

from sglang_pve.config.proxmox import ContainerSpec
from sglang_pve.provision import snapshots
from sglang_pve.provision.client import ProxmoxError
from sglang_pve.provision.nodes import Node


@operation(is_idempotent=False)
def rolled_back(spec: ContainerSpec, node: Node, snapshot: str | None = None):
    """
    Roll the container back to `snapshot` (default: its newest) and start it again.

    + spec: the container's ContainerSpec
    + node: its node's API (sglang_pve.provision.nodes)
    + snapshot: a snapshot name; None for the newest

    **Example:**

    .. code:: python

        rolled_back(name="Roll back CT 129", spec=spec, node=node, snapshot="sgpve-20261130-114809-config")
    """
    try:
        names = [s["name"] for s in snapshots.listed(node, spec.vmid)]
    except ProxmoxError as error:
        raise OperationError(str(error)) from None
    target = snapshot or (names[-1] if names else None)
    if target not in names:
        raise OperationError(
            f"{host.name}: container {spec.vmid} has no snapshot {target!r}"
            + (
                f" (it has: {', '.join(names)}). Fix: --data snapshot=NAME with one of them"
                if names
                else "; the toolkit takes one before every config change"
            )
        )
    if state.config.DIFF:
        newer = names[names.index(target) + 1 :]
        logger.info(
            f"{host.print_prefix}Will roll back container {spec.vmid} to {target}"
            + (f" (newer snapshots: {', '.join(newer)})" if newer else "")
        )
    yield FunctionCommand(_rollback, (node, spec.vmid, target), {})


def _rollback(state, host, node: Node, vmid: int, target: str) -> bool:
    try:
        snapshots.rollback(node, vmid, target)
    except ProxmoxError as error:
        host.log_styled(str(error), fg="red", log_func=logger.error)
        return False
    host.log(f"container {vmid} rolled back to {target} and started", logger.info)
    return True
