"""Power state: status/current, start, stop, shutdown, reboot (pve-container
src/PVE/API2/LXC/Status.pm)."""

import re

from . import conf as ctconf
from . import rules, stats
from .api_common import ct_vmid
from .api_config import apply_pending
from .errors import ApiError
from .node import Node, Request
from .routes import route


@route("GET", "/nodes/{node}/lxc/{vmid}/status/current")
def status_current(node: Node, req: Request):
    """Status.pm vm_status: vmstatus plus the HA manager's view (not HA-managed here)."""
    vmid = ct_vmid(node, req)
    _, config = node.read(vmid)
    return dict(stats.vmstatus(node, vmid, config), ha={"managed": 0})


def start_work(node: Node, vmid: int, log, check_lock: bool = True) -> None:
    """The start, under the CT's config lock for its whole length (Status.pm vm_start's $realcmd:
    lock_config, load_config, check_lock, PVE::LXC::vm_start): a start issued while another task
    holds the lock (a create still extracting) waits for it, then finds `lock: create` gone or
    fails. ``check_lock``: False for a reboot's start (PVE::LXC vm_reboot checks none)."""
    with node.locked(vmid):
        _, config = node.read(vmid)
        if check_lock:
            node.check_lock(config)
        if config.pending:
            apply_pending(config)
            node.write(vmid, config)
        text = node.conf_path(vmid).read_text(encoding="utf-8")
        for key, value in sorted(config.current.items()):
            if re.match(r"^dev\d+$", key):  # pve-container stats every device at each start
                node.device_check(rules.dev_path(value))
        node.backend.start(vmid, ctconf.current_text(text))
    log.log(f"CT {vmid} started")


def _locked_work(node: Node, work):
    """Status.pm vm_stop / vm_shutdown's $realcmd: lock_config, load_config, check_lock, then the work."""

    def locked(vmid, log):
        with node.locked(vmid):
            node.check_lock(node.read(vmid)[1])
            work(vmid, log)

    return locked


def _status_action(node: Node, req: Request, dtype: str, want_running: bool, work, check_lock: bool = False):
    """What Status.pm checks before fork_worker (the CT, the privilege, running or not); the
    config lock is the worker's. ``check_lock``: refuse a locked CT before the task (the
    emulator's reboot: stricter than Status.pm vm_reboot, which checks no lock)."""
    vmid = ct_vmid(node, req)
    _, config = node.read(vmid)
    node.check_priv(req.ident, f"/vms/{vmid}", "VM.PowerMgmt")
    running = node.running(vmid)
    if want_running and running:
        raise ApiError(f"CT {vmid} already running")
    if not want_running and not running:
        raise ApiError(f"CT {vmid} not running")
    if check_lock:
        node.check_lock(config)
    return node.tasks.start(dtype, str(vmid), req.ident.user, lambda log: work(vmid, log), req.task_error)


@route("POST", "/nodes/{node}/lxc/{vmid}/status/start")
def start(node: Node, req: Request):
    return _status_action(node, req, "vzstart", True, lambda vmid, log: start_work(node, vmid, log))


@route("POST", "/nodes/{node}/lxc/{vmid}/status/stop")
def stop(node: Node, req: Request):
    return _status_action(node, req, "vzstop", False, _locked_work(node, lambda v, log: node.backend.stop(v)))


@route("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown")
def shutdown(node: Node, req: Request):
    timeout = int(req.params.get("timeout", 60))
    force = req.params.get("forceStop") in ("1", True)

    def work(vmid, log):
        try:
            node.backend.shutdown(vmid, timeout)
        except Exception:
            if not force:
                raise
            log.log("shutdown timed out, forcing stop")
            node.backend.stop(vmid)

    return _status_action(node, req, "vzshutdown", False, _locked_work(node, work))


@route("POST", "/nodes/{node}/lxc/{vmid}/status/reboot")
def reboot(node: Node, req: Request):
    timeout = int(req.params.get("timeout", 60))

    def work(vmid, log):
        with node.locked(vmid):  # PVE::LXC vm_reboot: vm_stop and vm_start under lock_config
            node.backend.shutdown(vmid, timeout)
            start_work(node, vmid, log, check_lock=False)

    return _status_action(node, req, "vzreboot", False, work, check_lock=True)
