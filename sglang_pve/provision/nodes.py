"""The Proxmox nodes of one pyinfra run: one API client per node, and what it read, shared by the
guest connector (does the container exist yet?) and the operations (what does it look like?).

A no-change run reads one list per node (GET /nodes/{node}/lxc: every container and its status)
and, per container, one call: GET .../pending, which holds the current config (each key's
``value``, the digest included) and what waits in [pve:pending] (pve-guest-common GuestHelpers.pm
config_with_pending_array), all but the raw lxc.* lines, which the container operation reads for
every container of the node in one node command (provision/raw_lines.py) and hands over
(preload_raw). Without them, the current config is GET .../config ``current=1`` (what the container
runs with; without it PVE merges [pve:pending] into the answer). The plan's digest guards every
write, so a concurrent edit in between is caught; anything a write touches is read again.
"""

import threading
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
    _raw: dict[int, list[list[str]]] = field(default_factory=dict)
    # One login and one list per node per run: pyinfra connects its hosts at once (gevent greenlets,
    # threading patched by pyinfra_cli), and every guest's connector asks its node whether it exists.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def name(self) -> str:
        """The Proxmox node name (in API paths)."""
        return self.settings.node or self.host_name

    @property
    def api(self) -> Api:
        with self._lock:
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
        with self._lock:
            if self._containers is None:
                self._containers = {int(entry["vmid"]): entry for entry in self.api.get(self.path())}
            return self._containers

    def preload_raw(self, raw: dict[int, list[list[str]]]) -> None:
        """The raw lxc.* lines of containers as their node's /etc/pve holds them now (RawLxcLines):
        their config then comes with their pending values in one GET .../pending."""
        self._raw.update(raw)

    def config(self, vmid: int) -> dict:
        """The current config (pve-container API2/LXC/Config.pm vm_config with current=1), digest included."""
        if vmid not in self._configs and vmid in self._raw:
            self.pending(vmid)
        if vmid not in self._configs:
            self._configs[vmid] = self.api.get(self.path(vmid, "config"), current=True)
        return self._configs[vmid]

    def pending(self, vmid: int) -> dict[str, str | None]:
        """What waits in [pve:pending] for the next start: {key: new value, or None for a delete}
        (API2/LXC.pm vm_pending: pve-guest-common GuestHelpers.pm config_with_pending_array, whose
        items carry each current key's value too: with the raw lines preloaded, the config)."""
        if vmid not in self._pending:
            items = self.api.get(self.path(vmid, "pending"))
            changed = {i["key"]: str(i["pending"]) for i in items if "pending" in i}
            self._pending[vmid] = changed | {i["key"]: None for i in items if i.get("delete")}
            if vmid in self._raw and vmid not in self._configs:
                current = {i["key"]: i["value"] for i in items if "value" in i}
                self._configs[vmid] = current | ({"lxc": self._raw[vmid]} if self._raw[vmid] else {})
        return self._pending[vmid]

    def forget(self, vmid: int) -> None:
        """After a write (and before the writes): the next read asks the node again, GET .../config."""
        self._containers = None
        self._configs.pop(vmid, None)
        self._pending.pop(vmid, None)
        self._raw.pop(vmid, None)


_nodes: dict[str, Node] = {}


def node_for(host_name: str, data: dict) -> Node:
    """The run's Node for inventory host `host_name` (its settings validated: ConfigError)."""
    if host_name not in _nodes:
        _nodes[host_name] = Node(host_name, load_api_settings(host_name, data))
    return _nodes[host_name]
