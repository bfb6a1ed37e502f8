"""Who provisions whom: container hosts name their node (host data ``container.node``); a node
provisions every container of the inventory that names it. Used by the deploys (sglang_pve/deploys/)."""

import os

from pyinfra import host
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host

from sglang_pve.config.errors import ConfigError
from sglang_pve.config.gpu_sets import wanted_gpus
from sglang_pve.config.proxmox import ContainerSpec
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.provision.connector import NODE_GROUP, GuestConnector, known_hosts_file, node_host, validated_spec
from sglang_pve.provision.container import Guest
from sglang_pve.provision.node_facts import NodeState, node_state
from sglang_pve.provision.nodes import Node, node_for


def is_node() -> bool:
    return NODE_GROUP in host.groups


def pending() -> str | None:
    """Why the current container host cannot be reached yet (None: it can)."""
    return host.connector.pending if isinstance(host.connector, GuestConnector) else None


def _checked(call, *args):
    try:
        return call(*args)
    except ConfigError as error:
        raise PyinfraError(str(error)) from None  # pyinfra prints it plainly, no traceback


def this_node() -> Node:
    return _checked(node_for, host.name, host.data.dict())


def own_spec() -> ContainerSpec | None:
    """The current host's container spec (None: not a provisioned container), validated with its
    deploy data: every problem of the host in one report."""
    return _checked(validated_spec, host)


def container_node(spec: ContainerSpec) -> Node:
    """The API of the node the current container host lives on."""
    node = _checked(node_host, host, spec)
    return _checked(node_for, node.name, node.data.dict())


def reachable_node_host(spec: ContainerSpec):
    """The inventory host of the container's node, when this run reaches it (None: --limit left it
    out): where node-side facts of a container's task are read (its ZFS snapshots)."""
    node = _checked(node_host, host, spec)
    return node if node.connected else None


def node_driver() -> tuple[str, str | None] | None:
    """(node name, its NVIDIA driver version) for the current container host, read on the node
    (GpuDevices fact); None for a host that is not a provisioned container or whose node is not
    in this run (--limit)."""
    spec = own_spec()
    node = _checked(node_host, host, spec) if spec else None
    if node is None or not node.connected:
        return None
    return node.name, node_gpus(node).driver


def given_gpus() -> list[int] | None:
    """The GPU indices the current container host has once its node's part of this run is done (its
    container.gpus of what the node's driver has: desired.py passes exactly those); None for a host
    that is not a provisioned container or whose node is not in this run (--limit)."""
    spec = own_spec()
    node = _checked(node_host, host, spec) if spec else None
    if spec is None or node is None or not node.connected:
        return None
    have = node_gpus(node).gpu_indices
    return [i for i in wanted_gpus(spec, have) if i in have]


def node_read(node=None) -> NodeState:
    """A node's one read of the run (node_facts.py: GPUs, its files, uname -n, restarts owed, raw
    lines): this host's, or inventory host `node`'s (a container's node: its driver check)."""
    node = node or ctx_host.get()  # the Host itself: the `host` proxy is one object for every host
    return node_state(node, _checked(node_for, node.name, node.data.dict()))


def node_gpus(node=None) -> GpuDeviceInfo:
    """A node's GPUs (host preparation, provisioning and every container's driver check need them)."""
    return node_read(node).gpus


def containers() -> list[tuple[str, ContainerSpec, Guest]]:
    """(host name, spec, guest access) of every inventory host whose container lives on this node."""
    found = []
    for other in host.inventory:
        spec = _checked(validated_spec, other)
        if spec is None or spec.node != host.name:
            continue
        found.append((other.name, spec, guest_of(other)))
    vmids = [spec.vmid for _, spec, _ in found]
    if len(set(vmids)) != len(vmids):
        raise PyinfraError(
            f"{host.name}: two containers of the inventory share vmid "
            f"{next(v for v in vmids if vmids.count(v) > 1)}: give each its own"
        )
    return found


def guest_of(other) -> Guest:
    """How the controller reaches container host `other` once it runs."""
    key = other.data.get("ssh_key")
    return Guest(
        ssh_hostname=other.data.get("ssh_hostname") or other.name,
        known_hosts=_checked(known_hosts_file, other),
        public_keys=_public_key(other.name, key) if key else None,
        host_name=other.name,
    )


def _public_key(host_name: str, private_key: str) -> str:
    """The .pub beside the inventory's private key: authorized for root at create (ssh-public-keys)."""
    path = os.path.expanduser(private_key) + ".pub"
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError as error:
        raise PyinfraError(
            f"{host_name}: ssh_key = {private_key!r}: its public half {path} cannot be read "
            f"({error.strerror}); a new container authorizes it for root. Fix: "
            f"ssh-keygen -y -f {private_key} > {path}"
        ) from None
