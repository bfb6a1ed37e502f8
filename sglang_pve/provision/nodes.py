"""The Proxmox nodes of one pyinfra run: one API client per node, and what it read, shared by the
guest connector (does the container exist yet?) and the operations (what does it look like?).

A no-change run reads one list per node (GET /nodes/{node}/lxc: every container and its status)
and, per container, its current config (``current=1``: what the container runs with; without it
PVE merges [pve:pending] into the answer) and what waits in [pve:pending] (GET .../pending); the
execute pass reuses what the prepare pass read, so what was reviewed is what gets applied, and a
concurrent edit in between is caught by the config digest. Anything a write touches is read again.
"""

from dataclasses import dataclass, field

from sglang_pve.config.proxmox import ApiSettings, load_api_settings
from sglang_pve.provision.client import Api, connect
from sglang_pve.provision.credentials import read_credential
from sglang_pve.provision.restart_debt import DEBT_DIR


@dataclass
class Node:
    host_name: str  # the node's inventory name
    settings: ApiSettings
    etc_pve: str = "/etc/pve"  # on the node: pmxcfs
    lock_dir: str = "/run/lock/lxc"  # on the node: PVE's config locks (pve-container src/PVE/LXC/Config.pm)
    debt_dir: str = DEBT_DIR  # on the node: restarts owed (restart_debt.py)
    _api: Api | None = None
    _containers: dict[int, dict] | None = None
    _configs: dict[int, dict] = field(default_factory=dict)
    _pending: dict[int, dict[str, str | None]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The Proxmox node name (in API paths)."""
        return self.settings.node or self.host_name

    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = connect(self.settings, read_credential(self.host_name, self.settings))
        return self._api

    def path(self, vmid: int | None = None, *parts: str) -> str:
        """nodes/pve1/lxc[/129[/config]]"""
        return "/".join([f"nodes/{self.name}/lxc", *([str(vmid)] if vmid is not None else []), *parts])

    def conf_path(self, vmid: int) -> str:
        """The container's config file on its own node: /etc/pve/nodes/<node>/lxc/<vmid>.conf
        (pve-container Config.pm cfs_config_path; /etc/pve/lxc links there only on that node)."""
        return f"{self.etc_pve}/nodes/{self.name}/lxc/{vmid}.conf"

    def lock_path(self, vmid: int) -> str:
        """PVE's flock for the container's config (pve-container Config.pm config_file_lock)."""
        return f"{self.lock_dir}/pve-config-{vmid}.lock"

    def containers(self) -> dict[int, dict]:
        """{vmid: {"status": "running", "name": ...}} of every container on the node."""
        if self._containers is None:
            self._containers = {int(entry["vmid"]): entry for entry in self.api.get(self.path())}
        return self._containers

    def config(self, vmid: int) -> dict:
        """The current config (pve-container API2/LXC/Config.pm vm_config with current=1), digest included."""
        if vmid not in self._configs:
            self._configs[vmid] = self.api.get(self.path(vmid, "config"), current=True)
        return self._configs[vmid]

    def pending(self, vmid: int) -> dict[str, str | None]:
        """What waits in [pve:pending] for the next start: {key: new value, or None for a delete}
        (API2/LXC.pm vm_pending: pve-guest-common GuestHelpers.pm config_with_pending_array)."""
        if vmid not in self._pending:
            items = self.api.get(self.path(vmid, "pending"))
            changed = {i["key"]: str(i["pending"]) for i in items if "pending" in i}
            self._pending[vmid] = changed | {i["key"]: None for i in items if i.get("delete")}
        return self._pending[vmid]

    def forget(self, vmid: int) -> None:
        """After a write: the next read asks the node again."""
        self._containers = None
        self._configs.pop(vmid, None)
        self._pending.pop(vmid, None)


_nodes: dict[str, Node] = {}


def node_for(host_name: str, data: dict) -> Node:
    """The run's Node for inventory host `host_name` (its settings validated: ConfigError)."""
    if host_name not in _nodes:
        _nodes[host_name] = Node(host_name, load_api_settings(host_name, data))
    return _nodes[host_name]
