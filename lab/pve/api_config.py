"""A container's config: GET/PUT with digest, delete/revert and pending changes, the pending
list, resize (pve-container src/PVE/API2/LXC/Config.pm, LXC/Config.pm update_pct_config)."""

import re

from . import conf as ctconf
from . import rules
from .api_common import ct_vmid, is_mountpoint, typed
from .backend import BackendError
from .errors import ApiError, param_error
from .formats import format_size, parse_size, split_list
from .node import Node, Request
from .routes import route
from .validate import property_schema

# What a PUT does to a running CT follows pve-container at commit 94f5585 (src/PVE/LXC/Config.pm
# update_pct_config -> vmconfig_hotplug_pending, only for the options of this PUT): the
# $LXC_FASTPLUG_OPTIONS go to the config at once; memory, swap, cpulimit, cpuunits (the cgroup),
# netN (LXC.pm update_net), a new mpN (mountpoint_hotplug) and a new devN
# (device_passthrough_hotplug) are hotplugged through the backend; an existing mpN/devN and
# everything else is skipped and waits in [pve:pending]. Deleting a fastplug key, unusedN, swap,
# cpulimit, cpuunits or netN is done at once. A hotplug that fails fails the whole PUT with
# "unable to hotplug <opt>: <why>" and nothing written (API2/LXC/Config.pm update_vm:
# raise_param_exc before write_config).
FASTPLUG = {"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags", "lock"}
CGROUP = {"cpulimit", "cpuunits", "memory", "swap"}
DELETED_LIVE = {"swap", "cpulimit", "cpuunits"}


@route("GET", "/nodes/{node}/lxc/{vmid}/config")
def config_get(node: Node, req: Request):
    vmid = ct_vmid(node, req)
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
    vmid = ct_vmid(node, req)
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
        ctconf.assert_if_modified(digest, text)
        unprivileged = config.current.get("unprivileged", "0") == "1"
        rules.check_modify_perm(node, req.ident, vmid, config.current, {}, delete + revert, unprivileged)
        # PVE's texts, unbalanced quote included
        _check_listed("revert", revert, p, props, "you can't use '-{}' and '-revert {}' at the same time")
        _check_listed("delete", delete, p, props, "you can't use '-{}' and -delete {}' at the same time")
        for opt in set(delete) & set(revert):
            raise param_error({"delete": f"you can't use '-delete {opt}' and '-revert {opt}' at the same time"})
        rules.check_modify_perm(node, req.ident, vmid, config.current, p, [], unprivileged)
        _update(node, vmid, config, p, delete, revert)
        node.write(vmid, config)
    return None


def _check_listed(param: str, opts: list, p: dict, props: dict, both_message: str) -> None:
    for opt in opts:
        if property_schema(props, opt) is None:
            raise param_error({param: f"unknown option '{opt}'"})
        if opt in p:
            raise param_error({param: both_message.format(opt, opt)})


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
        if opt not in pending_delete:  # add_to_pending_delete: a pending value of opt stays
            pending_delete.append(opt)
    for opt in sorted(p):
        value = p[opt]
        if opt == "unprivileged":
            raise ApiError(f"unable to modify read-only option: '{opt}'")
        if is_mountpoint(opt):
            volume = rules.mp_volume(value)
            if node.new_disk_storage(volume, "local") is not None:
                raise ApiError("allocating a new volume in a config update is not emulated")
            if rules.mountpoint_type(volume) == "volume":
                sid = volume.split(":", 1)[0]
                if node.storages.get(sid) is None:
                    raise ApiError(f"storage '{sid}' does not exist")
                if "rootdir" not in node.storages.content(sid):
                    raise ApiError(f"storage '{sid}' does not allow content type 'rootdir' (Container)")
        elif re.match(r"^dev\d+$", opt):
            node.device_check(rules.dev_path(value))
        pending[opt] = value
        if opt in pending_delete:
            pending_delete.remove(opt)
    for opt in list(pending):  # cleanup_pending: nothing changed
        if opt != "delete" and cur.get(opt) == pending[opt]:
            del pending[opt]
    pending_delete = [opt for opt in pending_delete if opt in cur]
    selection = set(p) | set(delete)
    if node.running(vmid):
        _hotplug(node, vmid, cur, pending, pending_delete, selection)
    else:  # vmconfig_apply_pending
        for opt in [o for o in pending_delete if o in selection]:
            cur.pop(opt, None)
            pending_delete.remove(opt)
        for opt in [o for o in list(pending) if o in selection and o != "delete"]:
            cur[opt] = pending.pop(opt)
    pending.pop("delete", None)
    if pending_delete:
        pending["delete"] = ",".join(sorted(pending_delete))


def _hotplug(node: Node, vmid: int, cur: dict, pending: dict, pending_delete: list, selection: set) -> None:
    """vmconfig_hotplug_pending for the options of this PUT (see the table above)."""
    errors = {}
    for opt in sorted(o for o in pending if o in selection and o in FASTPLUG):
        cur[opt] = pending.pop(opt)
    for opt in sorted(o for o in pending_delete if o in selection):
        if not (opt in FASTPLUG or opt in DELETED_LIVE or re.match(r"^(net|unused)\d+$", opt)):
            continue  # die "skip\n"
        try:
            if opt in DELETED_LIVE or opt.startswith("net"):
                node.backend.hotplug(vmid, opt, cur.get(opt), None)
        except BackendError as error:
            errors[opt] = f"unable to hotplug {opt}: {error}"
            continue
        cur.pop(opt, None)
        pending_delete.remove(opt)
    for opt in sorted(o for o in pending if o in selection and o != "delete"):
        live = opt in CGROUP or re.match(r"^net\d+$", opt) or (re.match(r"^(mp|dev)\d+$", opt) and opt not in cur)
        if not live:
            continue  # skip non-hotpluggable, or "don't try to hotplug over existing mp/dev"
        try:
            node.backend.hotplug(vmid, opt, cur.get(opt), pending[opt])
        except BackendError as error:
            errors[opt] = f"unable to hotplug {opt}: {error}"
            continue
        cur[opt] = pending.pop(opt)
    if errors:
        raise param_error(errors)


def apply_pending(config) -> None:
    """vmconfig_apply_pending, at start: pending values become current."""
    pending = dict(config.pending)
    for key in split_list(pending.pop("delete", "")):
        config.current.pop(key.lstrip("!"), None)
    config.current.update(pending)
    config.pending.clear()


@route("GET", "/nodes/{node}/lxc/{vmid}/pending")
def pending(node: Node, req: Request):
    """PVE::GuestHelpers::config_with_pending_array (digest included, as PVE's conf holds it)."""
    vmid = ct_vmid(node, req)
    text, config = node.read(vmid)
    pend = dict(config.pending)
    deletes = {k.lstrip("!"): 2 if k.startswith("!") else 1 for k in split_list(pend.pop("delete", ""))}
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
    vmid = ct_vmid(node, req)
    disk, sizestr = req.params["disk"], req.params["size"]
    grow = sizestr.startswith("+")
    requested = parse_size(sizestr.lstrip("+"))
    if requested is None:
        raise ApiError("invalid size string")

    def load_and_check():
        text, config = node.read(vmid)
        node.check_lock(config)
        node.check_priv(req.ident, f"/vms/{vmid}", "VM.Config.Disk")
        ctconf.assert_if_modified(req.params.get("digest"), text)
        value = config.current.get(disk)
        if value is None:
            raise ApiError(f"unable to parse volume '{disk}' - not set")
        size = parse_size(re.search(r"(?:^|,)size=([^,]+)", value)[1]) if "size=" in value else 0
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
