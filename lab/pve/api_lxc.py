"""Container endpoints: list, create, destroy, config GET/PUT, status, start/stop/shutdown/
reboot (pve-container src/PVE/API2/LXC.pm, LXC/Config.pm, LXC/Status.pm)."""

import re

from . import conf as ctconf
from . import rules
from .errors import ApiError, param_error
from .formats import format_size, parse_size, split_list
from .node import UNPRIVILEGED_DEFAULT, Node, Request
from .routes import route
from .validate import parse_boolean, property_schema

# Keys update_pct_config applies at once to a running CT (LXC_FASTPLUG_OPTIONS + hotplugged
# cgroup values); the rest waits in [pve:pending] until the next start. Unlike PVE, new devN/mpN
# and netN of a running CT wait too: the backend has no hotplug, and a config claiming a device
# the running container lacks would lie.
HOTPLUG = {"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores",
           "tags", "lock", "cpulimit", "cpuunits", "memory", "swap"}
CREATE_ONLY = {"ostemplate", "password", "ssh-public-keys", "storage", "pool", "start", "force",
               "restore", "unique", "ignore-unpack-errors", "bwlimit", "ha-managed", "unprivileged"}
SSH_KEY_RE = re.compile(r"^\s*(\S+\s+)?(ssh-(rsa|dss|ed25519)|ecdsa-sha2-\S+|sk-\S+)\s+"
                        r"[A-Za-z0-9+/]+=*(\s.*)?$")


def _ct(node: Node, req: Request) -> int:
    node.check_node(req.params["node"])
    return int(req.params["vmid"])


def _is_mountpoint(key: str) -> bool:
    return key == "rootfs" or bool(re.match(r"^mp\d+$", key))


def typed(section: dict, returns: dict) -> dict:
    """Config values as PVE's GET returns them: integers/booleans/numbers as JSON numbers
    (PVE::LXC::Config->check_type on parse), everything else as written."""
    props = returns.get("properties", {})
    out = {}
    for key, value in section.items():
        schema = property_schema(props, key) or {}
        kind = schema.get("type")
        if kind in ("integer", "boolean") and re.match(r"^[+-]?\d+$", str(value)):
            value = int(value)
        elif kind == "boolean" and parse_boolean(str(value)) is not None:
            value = int(parse_boolean(str(value)))
        elif kind == "number" and re.match(r"^[+-]?\d+(\.\d+)?$", str(value)):
            value = float(value) if "." in str(value) else int(value)
        out[key] = value
    return out


@route("GET", "/nodes/{node}/lxc")
def ct_list(node: Node, req: Request):
    node.check_node(req.params["node"])
    res = []
    for vmid in node.vmids():
        try:
            _, config = node.read(vmid)
        except ApiError:
            continue  # removed meanwhile
        cur = config.current
        item = {"vmid": vmid, "status": node.backend.status(vmid), "type": "lxc",
                "name": cur.get("hostname", f"CT{vmid}"), "cpus": int(cur.get("cores", 1)),
                "maxmem": int(cur.get("memory", 512)) << 20,
                "maxswap": int(cur.get("swap", 512)) << 20, "maxdisk": 0, "uptime": 0}
        for key in ("lock", "tags"):
            if key in cur:
                item[key] = cur[key]
        res.append(item)
    return res


# -- create ------------------------------------------------------------------------------------
@route("POST", "/nodes/{node}/lxc")
def ct_create(node: Node, req: Request):
    vmid = _ct(node, req)
    p = {k: v for k, v in req.params.items() if k not in ("node", "vmid")}
    ident = req.ident
    unprivileged = p.pop("unprivileged", None)
    if p.get("restore") not in (None, "0"):
        raise ApiError("restore is not emulated")
    unprivileged = UNPRIVILEGED_DEFAULT[node.version] if unprivileged is None else \
        int(unprivileged)
    if not unprivileged:
        node.check_priv(ident, "/", "Sys.Modify")
    if node.exists(vmid):
        raise ApiError(f"CT {vmid} already exists on node '{node.name}'")
    ssh_keys = p.pop("ssh-public-keys", None)
    for line in (ssh_keys or "").split("\n"):
        if line.strip() and not SSH_KEY_RE.match(line):
            raise ApiError("SSH public key validation error")
    node.check_priv(ident, f"/vms/{vmid}", "VM.Allocate")
    ostemplate = p.pop("ostemplate")
    storage = p.pop("storage", "local")
    start = p.pop("start", "0") in ("1", True)
    for key in CREATE_ONLY:
        p.pop(key, None)
    rules.check_modify_perm(node, ident, vmid, None, p, [], unprivileged)

    tsid = node.storages.volume_storage(ostemplate)
    if tsid is None:
        raise ApiError(f"unable to parse volume ID '{ostemplate}'")
    if "vztmpl" not in node.storages.content(ostemplate.split(":", 1)[0]):
        raise ApiError(f"storage '{ostemplate.split(':', 1)[0]}' does not support content-type "
                       "'vztmpl'")

    p.setdefault("rootfs", f"{storage}:4")  # PVE: a 4 GiB rootfs on the default storage
    allocations = {}
    for key in sorted(k for k in p if _is_mountpoint(k)):
        volume = rules.mp_volume(p[key])
        if rules.mountpoint_type(volume) != "volume":
            if not ident.is_root:
                raise ApiError("Only root can pass arbitrary filesystem paths.")
            continue
        new = node.new_disk_storage(volume, storage)
        if new:
            allocations[key] = new
        elif node.storages.volume_storage(volume) is None:
            raise ApiError(f"storage '{volume.split(':', 1)[0]}' does not exist")
    for key in sorted(k for k in p if re.match(r"^dev\d+$", k)):
        path = p[key].split(",")[0]
        node.device_check(path.split("=", 1)[1] if path.startswith("path=") else path)

    config = ctconf.CTConfig()
    config.current["lock"] = "create"
    with node.locked(vmid):
        if node.exists(vmid):  # create_and_lock_config
            raise ApiError(f"unable to create CT {vmid} - CT {vmid} already exists on node "
                           f"'{node.name}'")
        node.write(vmid, config)

    def work(log):
        try:
            cur = config.current
            for key, value in p.items():
                cur[key] = value
            for index, (key, (sid, size)) in enumerate(sorted(allocations.items(),
                                                              key=lambda kv: kv[0] != "rootfs")):
                volid = node.storages.new_volume(sid, vmid, index)
                rest = p[key].split(",", 1)[1:] if "," in p[key] else []
                cur[key] = ",".join([volid, *rest, f"size={size}G"])
                log.log(f"allocated volume {volid} ({size} GiB) for {key}")
            cur.setdefault("hostname", f"CT{vmid}")
            cur.setdefault("memory", "512")
            cur.setdefault("swap", "512")
            cur.setdefault("arch", "amd64")
            cur.setdefault("ostype", _ostype(ostemplate))
            if unprivileged:
                cur["unprivileged"] = "1"
            if not node.storages.template_exists(ostemplate):
                raise ApiError(f"unable to create CT {vmid} - volume '{ostemplate}' does not "
                               "exist")
            log.log(f"extracting archive '{ostemplate}'")
            node.backend.create(vmid, _plain(cur), ostemplate, rules.mp_volume(cur["rootfs"]),
                                ssh_public_keys=ssh_keys)
            cur.pop("lock", None)
            node.write(vmid, config)
        except Exception:
            node.remove(vmid)  # destroy_config_on_error
            raise
        if start:
            _start_work(node, vmid, log)

    return node.tasks.start("vzcreate", str(vmid), ident.user, work, req.task_error)


def _ostype(ostemplate: str) -> str:
    name = ostemplate.rsplit("/", 1)[-1]
    for ostype in ("debian", "ubuntu", "centos", "fedora", "alpine", "archlinux", "opensuse"):
        if name.startswith(ostype):
            return ostype
    return "unmanaged"


def _plain(section: dict) -> dict:
    """A section as the backend gets it: {key: value} with lxc as (key, value) pairs."""
    out = {k: v for k, v in section.items() if k != "lxc"}
    out["lxc"] = [tuple(kv) for kv in section.get("lxc", [])]
    return out


# -- destroy -----------------------------------------------------------------------------------
@route("DELETE", "/nodes/{node}/lxc/{vmid}")
def ct_destroy(node: Node, req: Request):
    vmid = _ct(node, req)
    _, config = node.read(vmid)
    node.check_priv(req.ident, f"/vms/{vmid}", "VM.Allocate")
    if req.params.get("force") not in ("1", True) and node.running(vmid):
        raise ApiError(f"unable to destroy CT {vmid} - container is running")
    node.check_lock(config)

    def work(log):
        with node.locked(vmid):
            _, config = node.read(vmid)
            node.check_lock(config)
            if node.running(vmid):
                log.warn(f"forced to stop CT {vmid} before destroying!")
                node.backend.stop(vmid)
            node.backend.destroy(vmid)
            node.remove(vmid)

    return node.tasks.start("vzdestroy", str(vmid), req.ident.user, work, req.task_error)


# -- config ------------------------------------------------------------------------------------
@route("GET", "/nodes/{node}/lxc/{vmid}/config")
def config_get(node: Node, req: Request):
    vmid = _ct(node, req)
    text, config = node.read(vmid)
    if snapname := req.params.get("snapshot"):
        if snapname not in config.snapshots:
            raise ApiError(f"snapshot '{snapname}' does not exist")
        section = dict(config.snapshots[snapname])
    else:
        section = dict(config.current)
        if req.params.get("current") not in ("1", True):
            pending = dict(config.pending)
            for key in split_list(pending.pop("delete", "")):
                section.pop(key.lstrip("!"), None)
            section.update(pending)
    section.pop("snapstate", None)
    out = typed(section, req.info.get("returns", {}))
    out["digest"] = ctconf.digest(text)
    return out


@route("PUT", "/nodes/{node}/lxc/{vmid}/config")
def config_put(node: Node, req: Request):
    vmid = _ct(node, req)
    p = {k: v for k, v in req.params.items() if k not in ("node", "vmid")}
    digest = p.pop("digest", None)
    if not p:
        raise ApiError("no options specified")
    delete = split_list(p.pop("delete", ""))
    revert = split_list(p.pop("revert", ""))
    props = req.info["parameters"]["properties"]
    with node.locked(vmid):
        text, config = node.read(vmid)
        node.check_lock(config)
        if digest and digest != ctconf.digest(text):  # PVE::Tools::assert_if_modified
            raise ApiError("detected modified configuration - file changed by other user? "
                           "Try again.")
        unprivileged = config.current.get("unprivileged", "0") == "1"
        rules.check_modify_perm(node, req.ident, vmid, config.current, {}, delete + revert,
                                unprivileged)
        for opt in revert:
            if property_schema(props, opt) is None:
                raise param_error({"revert": f"unknown option '{opt}'"})
            if opt in p:
                raise param_error({"revert": f"you can't use '-{opt}' and '-revert {opt}' at "
                                             "the same time"})
        for opt in delete:
            if property_schema(props, opt) is None:
                raise param_error({"delete": f"unknown option '{opt}'"})
            if opt in p:
                raise param_error({"delete": f"you can't use '-{opt}' and -delete {opt}' at "
                                             "the same time"})
            if opt in revert:
                raise param_error({"delete": f"you can't use '-delete {opt}' and '-revert "
                                             f"{opt}' at the same time"})
        rules.check_modify_perm(node, req.ident, vmid, config.current, p, [], unprivileged)
        _update(node, vmid, config, p, delete, revert)
        node.write(vmid, config)
    return None


def _update(node: Node, vmid: int, config, p: dict, delete: list, revert: list) -> None:
    """update_pct_config: into [pve:pending], then applied (stopped CT) or hotplugged."""
    cur, pending = config.current, config.pending
    pending_delete = [k for k in split_list(pending.get("delete", "")) if k not in revert]
    for opt in revert:
        pending.pop(opt, None)
    for opt in delete:
        if opt not in cur and opt not in pending:
            continue  # PVE warns "cannot delete '$opt' - not set in current configuration!"
        if opt in ("memory", "rootfs", "ostype"):
            raise ApiError(f"unable to delete required option '{opt}'")
        if opt == "unprivileged":
            raise ApiError(f"unable to delete read-only option: '{opt}'")
        pending.pop(opt, None)
        if opt not in pending_delete:
            pending_delete.append(opt)
    for opt in sorted(p):
        value = p[opt]
        if opt == "unprivileged":
            raise ApiError(f"unable to modify read-only option: '{opt}'")
        if _is_mountpoint(opt):
            volume = rules.mp_volume(value)
            if node.new_disk_storage(volume, "local") is not None:
                raise ApiError("allocating a new volume in a config update is not emulated")
            if rules.mountpoint_type(volume) == "volume":
                sid = volume.split(":", 1)[0]
                if node.storages.get(sid) is None:
                    raise ApiError(f"storage '{sid}' does not exist")
                if "rootdir" not in node.storages.content(sid):
                    raise ApiError(f"storage '{sid}' does not allow content type 'rootdir' "
                                   "(Container)")
        elif re.match(r"^dev\d+$", opt):
            path = rules.mp_volume(value) if "path=" not in value else \
                value.split("path=", 1)[1].split(",")[0]
            node.device_check(path)
        pending[opt] = value
        if opt in pending_delete:
            pending_delete.remove(opt)
    for opt in list(pending):  # cleanup_pending: nothing changed
        if opt != "delete" and cur.get(opt) == pending[opt]:
            del pending[opt]
    running = node.running(vmid)
    for opt in list(pending):
        if opt != "delete" and (not running or opt in HOTPLUG):
            cur[opt] = pending.pop(opt)
    for opt in list(pending_delete):
        if not running or opt in HOTPLUG or opt.startswith("unused"):
            cur.pop(opt, None)
            pending_delete.remove(opt)
    pending.pop("delete", None)
    if pending_delete:
        pending["delete"] = ",".join(sorted(pending_delete))


def apply_pending(config) -> None:
    """vmconfig_apply_pending, at start: pending values become current."""
    pending = dict(config.pending)
    for key in split_list(pending.pop("delete", "")):
        config.current.pop(key.lstrip("!"), None)
    config.current.update(pending)
    config.pending.clear()


# -- status ------------------------------------------------------------------------------------
@route("GET", "/nodes/{node}/lxc/{vmid}/status/current")
def status_current(node: Node, req: Request):
    vmid = _ct(node, req)
    _, config = node.read(vmid)
    cur = config.current
    res = {"vmid": vmid, "status": node.backend.status(vmid), "type": "lxc",
           "name": cur.get("hostname", f"CT{vmid}"), "cpus": int(cur.get("cores", 1)),
           "maxmem": int(cur.get("memory", 512)) << 20, "maxswap": int(cur.get("swap", 512)) << 20,
           "maxdisk": 0, "uptime": 0, "ha": {"managed": 0}}
    if "lock" in cur:
        res["lock"] = cur["lock"]
    return res


def _start_work(node: Node, vmid: int, log) -> None:
    with node.locked(vmid):
        _, config = node.read(vmid)
        if config.pending:
            apply_pending(config)
            node.write(vmid, config)
        text = node.conf_path(vmid).read_text(encoding="utf-8")
    for key, value in sorted(config.current.items()):
        if re.match(r"^dev\d+$", key):  # pve-container stats every device at each start
            path = value.split(",")[0]
            node.device_check(path.split("=", 1)[1] if path.startswith("path=") else path)
    node.backend.start(vmid, ctconf.current_text(text))
    log.log(f"CT {vmid} started")


def _status_action(node: Node, req: Request, dtype: str, want_running: bool, work):
    vmid = _ct(node, req)
    _, config = node.read(vmid)
    node.check_priv(req.ident, f"/vms/{vmid}", "VM.PowerMgmt")
    running = node.running(vmid)
    if want_running and running:
        raise ApiError(f"CT {vmid} already running")
    if not want_running and not running:
        raise ApiError(f"CT {vmid} not running")
    node.check_lock(config)
    return node.tasks.start(dtype, str(vmid), req.ident.user, lambda log: work(vmid, log),
                            req.task_error)


@route("POST", "/nodes/{node}/lxc/{vmid}/status/start")
def start(node: Node, req: Request):
    return _status_action(node, req, "vzstart", True,
                          lambda vmid, log: _start_work(node, vmid, log))


@route("POST", "/nodes/{node}/lxc/{vmid}/status/stop")
def stop(node: Node, req: Request):
    return _status_action(node, req, "vzstop", False,
                          lambda vmid, log: node.backend.stop(vmid))


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

    return _status_action(node, req, "vzshutdown", False, work)


@route("POST", "/nodes/{node}/lxc/{vmid}/status/reboot")
def reboot(node: Node, req: Request):
    timeout = int(req.params.get("timeout", 60))

    def work(vmid, log):
        node.backend.shutdown(vmid, timeout)
        _start_work(node, vmid, log)

    return _status_action(node, req, "vzreboot", False, work)


@route("GET", "/nodes/{node}/lxc/{vmid}/feature")
def feature(node: Node, req: Request):
    vmid = _ct(node, req)
    _, config = node.read(vmid)
    section = config.current
    if snapname := req.params.get("snapname"):
        if snapname not in config.snapshots:
            raise ApiError(f"snapshot '{snapname}' does not exist")
        section = config.snapshots[snapname]
    return {"hasFeature": int(snapshot_possible(node, section))}


def snapshot_possible(node: Node, section: dict) -> bool:
    """has_feature('snapshot'): every mount point (rootfs, mpN) on a snapshot-capable storage;
    a bind mount or device mount point never is."""
    return all(node.storages.can_snapshot(rules.mp_volume(v))
               for k, v in section.items() if _is_mountpoint(k))


@route("GET", "/nodes/{node}/lxc/{vmid}/pending")
def pending(node: Node, req: Request):
    """PVE::GuestHelpers::config_with_pending_array (digest included, as PVE's conf holds it)."""
    vmid = _ct(node, req)
    text, config = node.read(vmid)
    pend = dict(config.pending)
    deletes = {k.lstrip("!"): 2 if k.startswith("!") else 1
               for k in split_list(pend.pop("delete", ""))}
    current = dict(config.current, digest=ctconf.digest(text))
    res = []
    for key in sorted(k for k in current if k != "lxc"):
        item = {"key": key, "value": current[key]}
        if key in pend:
            item["pending"] = pend.pop(key)
        if key in deletes:
            item["delete"] = deletes.pop(key)
        res.append(item)
    res += [{"key": k, "pending": v} for k, v in sorted(pend.items())]
    res += [{"key": k, "delete": d} for k, d in sorted(deletes.items())]
    return res


@route("PUT", "/nodes/{node}/lxc/{vmid}/resize")
def resize(node: Node, req: Request):
    """Grow a mount point (task "resize"). The size lives in the config; DirBackend and the
    lab's overlay rootfs have no size to change."""
    vmid = _ct(node, req)
    disk, sizestr = req.params["disk"], req.params["size"]
    grow = sizestr.startswith("+")
    requested = parse_size(sizestr.lstrip("+"))
    if requested is None:
        raise ApiError("invalid size string")

    def load_and_check():
        text, config = node.read(vmid)
        node.check_lock(config)
        node.check_priv(req.ident, f"/vms/{vmid}", "VM.Config.Disk")
        if req.params.get("digest") and req.params["digest"] != ctconf.digest(text):
            raise ApiError("detected modified configuration - file changed by other user? "
                           "Try again.")
        value = config.current.get(disk)
        if value is None:
            raise ApiError(f"unable to parse volume '{disk}' - not set")
        size = parse_size(re.search(r"(?:^|,)size=([^,]+)", value)[1]) \
            if "size=" in value else 0
        newsize = size + requested if grow else requested
        if newsize < size:
            raise ApiError("unable to shrink disk size")
        if newsize == size:
            raise ApiError("disk is already at specified size")
        return config, value, newsize

    load_and_check()  # early checks before forking, as PVE does

    def work(log):
        with node.locked(vmid):
            config, value, newsize = load_and_check()
            parts = [p for p in value.split(",") if not p.startswith("size=")]
            config.current[disk] = ",".join(parts + [f"size={format_size(newsize)}"])
            node.write(vmid, config)
        log.log(f"resized {disk} to {format_size(newsize)}")

    return node.tasks.start("resize", str(vmid), req.ident.user, work, req.task_error)
