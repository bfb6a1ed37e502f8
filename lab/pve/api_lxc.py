"""Container endpoints: list, create, destroy (pve-container src/PVE/API2/LXC.pm)."""

import re

from . import conf as ctconf
from . import rules, stats
from .api_common import ct_vmid, is_mountpoint, plain, volumes
from .api_status import start_work
from .errors import ApiError
from .node import UNPRIVILEGED_DEFAULT, Node, Request
from .routes import route

CREATE_ONLY = {
    "ostemplate",
    "password",
    "ssh-public-keys",
    "storage",
    "pool",
    "start",
    "force",
    "restore",
    "unique",
    "ignore-unpack-errors",
    "bwlimit",
    "ha-managed",
    "unprivileged",
}
SSH_KEY_RE = re.compile(
    r"^\s*(\S+\s+)?(ssh-(rsa|dss|ed25519)|ecdsa-sha2-\S+|sk-\S+)\s+"
    r"[A-Za-z0-9+/]+=*(\s.*)?$"
)


@route("GET", "/nodes/{node}/lxc")
def ct_list(node: Node, req: Request):
    """API2/LXC.pm vmlist: vmstatus of every container."""
    node.check_node(req.params["node"])
    return [stats.vmstatus(node, vmid, config) for vmid, config in node.configs()]


@route("POST", "/nodes/{node}/lxc")
def ct_create(node: Node, req: Request):
    vmid = ct_vmid(node, req)
    p = {k: v for k, v in req.params.items() if k not in ("node", "vmid")}
    ident = req.ident
    unprivileged = p.pop("unprivileged", None)
    if p.get("restore") not in (None, "0"):
        raise ApiError("restore is not emulated")
    unprivileged = UNPRIVILEGED_DEFAULT[node.version] if unprivileged is None else int(unprivileged)
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
        raise ApiError(f"storage '{ostemplate.split(':', 1)[0]}' does not support content-type 'vztmpl'")

    p.setdefault("rootfs", f"{storage}:4")  # PVE: a 4 GiB rootfs on the default storage
    allocations = {}
    for key in sorted(k for k in p if is_mountpoint(k)):
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
        node.device_check(rules.dev_path(p[key]))

    config = ctconf.CTConfig()
    config.current["lock"] = "create"
    with node.locked(vmid):
        if node.exists(vmid):  # create_and_lock_config
            raise ApiError(f"unable to create CT {vmid} - CT {vmid} already exists on node '{node.name}'")
        node.write(vmid, config)

    def work(log):
        # the create under the CT's config lock for its whole length, the start after it outside
        # (pve-container src/PVE/API2/LXC.pm create_vm: $realcmd = lock_config($vmid, $code), then
        # vm_start when start=1): a start, stop or config change meanwhile waits for the lock
        with node.locked(vmid):
            created = False
            try:
                if req.task_error:  # injected here, so that the cleanup below runs
                    raise ApiError(req.task_error)
                cur = config.current
                for key, value in p.items():
                    cur[key] = value
                for index, (key, (sid, size)) in enumerate(
                    sorted(allocations.items(), key=lambda kv: kv[0] != "rootfs")
                ):
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
                    raise ApiError(f"unable to create CT {vmid} - volume '{ostemplate}' does not exist")
                log.log(f"extracting archive '{ostemplate}'")
                created = True
                node.backend.create(
                    vmid, plain(cur), ostemplate, rules.mp_volume(cur["rootfs"]), ssh_public_keys=ssh_keys
                )
                cur.pop("lock", None)
                node.write(vmid, config)
            except Exception:
                if created:  # destroy_disks: what the backend made of it goes too
                    try:
                        node.backend.destroy(vmid)
                    except Exception as e:
                        log.warn(f"cleanup of CT {vmid} failed: {e}")
                for volume in volumes(config.current):  # vdisk_free of what was allocated (a zfspool's dataset)
                    node.storages.free_volume(volume)
                node.remove(vmid)  # destroy_config_on_error
                raise
        if start:
            start_work(node, vmid, log)

    return node.tasks.start("vzcreate", str(vmid), ident.user, work)


def _ostype(ostemplate: str) -> str:
    name = ostemplate.rsplit("/", 1)[-1]
    for ostype in ("debian", "ubuntu", "centos", "fedora", "alpine", "archlinux", "opensuse"):
        if name.startswith(ostype):
            return ostype
    return "unmanaged"


@route("DELETE", "/nodes/{node}/lxc/{vmid}")
def ct_destroy(node: Node, req: Request):
    vmid = ct_vmid(node, req)
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
            for volume in volumes(config.current):  # destroy_disks: vdisk_free (zfs destroy -r)
                node.storages.free_volume(volume)
            node.remove(vmid)

    return node.tasks.start("vzdestroy", str(vmid), req.ident.user, work, req.task_error)
