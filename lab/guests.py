"""pve1's guests as real LXC system containers: the part pve-container plays on a node.

A guest is a sibling of pve1 in the lab's lxcpath, named by its vmid. Its Proxmox config
(/etc/pve/lxc/<vmid>.conf, written by the emulator) is translated the way pve-container's
update_lxc_config does it:

- hostname -> lxc.uts.name; netN -> a veth on the lab bridge (vmbr0 is the lab bridge) with the
  config's hwaddr and ip=/gw=; memory/swap/cores/cpulimit -> cgroup limits;
- rootfs and volume mpN -> the volume's directory: for the rootfs an overlay upper dir over the
  cached Debian rootfs, which stands in for the template unpacked into a storage volume (it
  persists across stop/start); bind mpN and raw lxc.mount.entry sources are paths on the node;
- devN -> its cgroup2 allow (and deny-write) rule, a mknod copy in the guest's passthrough dir
  with the entry's mode/uid/gid, the device list and the autodev hook that binds each copy into
  /dev (lab/devn.py, lab/autodev_hook.sh: pve-container's update_lxc_config, prestart and
  autodev hooks);
- raw lxc.* lines: of the keys pve-container takes (lab/lxc_keys.py), those guestd passes
  (lxc_keys.PASSED: device rules, bind mounts, id maps, what acts inside the guest; a hook,
  AppArmor override or include refuses the start) copied verbatim in config order as
  ``key = value``, as update_lxc_config copies them; lab only: an absolute
  lxc.mount.entry source is a path on the node, so it is rewritten to where the lab host
  reaches it (no link on the node followed: lab/beneath.py), and every device rule gets its
  cgroup v1 twin (lab/container.py);
- unprivileged=1 -> lxc.idmap (0 -> 100000, 65536 ids) over a uid-shifted copy of the rootfs;
- /etc/hostname and /etc/hosts written at every start, as PVE's setup code does.

`create` generates new SSH host keys (as PVE does) and writes ``ssh-public-keys`` to root's
authorized_keys: a client learns the host keys through the node, never on first use.
Snapshots copy the rootfs volume's upper dir; rollback puts the copy back.
"""

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from lab import apt_repo, beneath, container, devn, layout, lxc_keys, lxcfs, network, node, rootfs
from lab.shell import LabError, run

UID_SHIFT = 100000
ID_COUNT = 65536
VOLUME_ID = re.compile(r"^([a-z][a-z0-9._-]*):([A-Za-z0-9][A-Za-z0-9._-]*)$")
NET_KEY = re.compile(r"^net(\d+)$")
MP_KEY = re.compile(r"^mp(\d+)$")
NODE = layout.NODES[layout.NODE]  # the node this process serves (serve_as); pve1 unless guestd says otherwise


class GuestError(LabError):
    """A guest action that failed; the message goes back to the emulator's task."""


# -- Proxmox config ---------------------------------------------------------------------------


def parse_config(text: str, vmid: int = 0) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The current section of a PVE container config: options and raw lxc.* lines, read as
    pve-container's src/PVE/LXC/Config.pm parse_pct_config reads them (non-strict, as a start
    loads the config): the section ends at [pve:pending] or a snapshot; ``lxc.KEY: value`` and
    ``lxc.KEY = value`` both; a raw key PVE does not take is dropped with its warning (stderr);
    one PVE takes but guestd does not pass (lxc_keys.refused_by_guestd: hooks, AppArmor, includes)
    refuses the start, every such key named at once, before anything runs.

    >>> parse_config("# note\\nhostname: ct1\\nlxc.mount.entry = /a a none bind 0 0\\n[snap]\\nhostname: old\\n")
    ({'hostname': 'ct1'}, [('lxc.mount.entry', '/a a none bind 0 0')])
    """
    options: dict[str, str] = {}
    raw: list[tuple[str, str]] = []
    refused: list[str] = []
    for line in text.splitlines():
        if re.match(r"^\[(pve:pending|[a-z][a-z0-9_\-]+)\]\s*$", line, re.I):
            break
        if not line.strip() or line.startswith("#"):
            continue
        if match := re.match(r"^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$", line):
            key, value = match.group(1), match.group(3)
            validity = lxc_keys.validity(key, vmid)
            if key == "lxc.environment.runtime":
                options["env"] = f"{options['env']}\0{value}" if "env" in options else value
            elif validity is True and (reason := lxc_keys.refused_by_guestd(key)):
                refused.append(reason)
            elif validity is True:
                raw.append((key, value))
            else:
                reason = validity or f"unable to parse config: {line}"
                print(f"vm {vmid} - {key}: {reason}" if validity else f"vm {vmid} - {reason}", file=sys.stderr)
        elif match := re.match(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$", line):
            options[match.group(1)] = match.group(2)
    if refused:
        raise GuestError(f"CT {vmid}: refused by the lab's guestd: " + "; ".join(refused))
    return options, raw


def property_string(value: str, default_key: str) -> dict[str, str]:
    """A PVE property string, ``[default=]v,k=v,...``.

    >>> property_string("/dev/nvidia0,mode=0666", "path")
    {'path': '/dev/nvidia0', 'mode': '0666'}
    """
    result = {}
    for part in value.split(","):
        key, sep, item = part.partition("=")
        result.update({key: item} if sep else {default_key: part})
    return result


def flag(value: str | None) -> bool:
    return (value or "0").lower() in ("1", "on", "yes", "true")


# -- volumes and node paths -------------------------------------------------------------------


def serve_as(node: layout.LabNode) -> None:
    """The node whose guests this process acts on (guestd runs one per node: lab/guestd.py)."""
    global NODE
    NODE = node


def volume_dir(volid: str, on: layout.LabNode | None = None) -> Path:
    """The directory standing in for a storage volume of the node, <volumes_dir>/<storage>/<volume>."""
    match = VOLUME_ID.match(volid)
    if not match:
        raise GuestError(f"unable to parse volume ID '{volid}'")
    return (on or NODE).volumes_dir / match.group(1) / match.group(2)


def node_path(path: str) -> Path:
    """A path on the node as the lab host reaches it: pve1's bind mounts (model storage) map to
    their host sources, anything else, its NVIDIA device nodes included (made in pve1's /dev by
    its nvidia-modprobe), is read through pve1's root."""
    if not path.startswith("/") or ".." in Path(path).parts:
        raise GuestError(f"'{path}' is not an absolute path on {NODE.name} without '..'")
    binds = {mount: host for mount, host in layout.STORAGE_MOUNTS.items()}
    # no link below the root is followed (lab/beneath.py says why): through /proc/<pid>/root an
    # absolute link on pve1 would name the lab host's own file
    try:
        for mount, host in binds.items():
            if path == mount or path.startswith(mount + "/"):
                return beneath.beneath(host, path[len(mount) :], f"'{path}' on {NODE.name}")
        pid = container.init_pid(NODE.name)
        if pid is None:
            raise GuestError(f"{NODE.name} is not running; run `python -m lab up`")
        return beneath.beneath(Path(f"/proc/{pid}/root"), path, f"'{path}' on {NODE.name}")
    except beneath.LinkError as error:
        raise GuestError(str(error)) from None


def name(vmid: int) -> str:
    return str(vmid)


def guest_dir(vmid: int) -> Path:
    return container.container_dir(name(vmid))


def _record(vmid: int) -> dict:
    try:
        return json.loads((guest_dir(vmid) / "guest.json").read_text())
    except FileNotFoundError:
        raise GuestError(f"CT {vmid} has no root filesystem volume (not created)") from None


def shifted_rootfs(lower: Path) -> Path:
    """The cached rootfs with every owner moved by UID_SHIFT (unprivileged guests), built once
    in a temp dir and renamed, like the rootfs itself."""
    final = lower.with_name(f"{lower.name}-shift{UID_SHIFT}")
    if final.is_dir():
        return final
    tmp = lower.with_name(f".{final.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    run(["cp", "-a", str(lower), str(tmp)])
    entries = [str(tmp)]
    entries += [os.path.join(root, item) for root, dirs, files in os.walk(tmp) for item in dirs + files]
    for entry in entries:
        info = os.lstat(entry)
        os.lchown(entry, info.st_uid + UID_SHIFT, info.st_gid + UID_SHIFT)
        if not stat.S_ISLNK(info.st_mode):
            os.chmod(entry, stat.S_IMODE(info.st_mode))  # chown dropped setuid bits
    tmp.rename(final)
    return final


# -- the LXC config -----------------------------------------------------------------------------


def _net_lines(vmid: int, index: int, value: str) -> list[str]:
    net = property_string(value, "name")
    bridge = net.get("bridge", "")
    if bridge != "vmbr0":
        raise GuestError(f"net{index}: bridge '{bridge}' does not exist (the lab node has vmbr0)")
    address = net.get("ip") if net.get("ip") not in (None, "dhcp", "manual") else None
    hwaddr = net.get("hwaddr") or layout.mac_address(f"10.{vmid % 256}.0.{index}")
    veth = layout.veth_name(f"{vmid}i{index}")
    return container.net_lines(index, veth, hwaddr.lower(), address, net.get("gw"), net.get("name", f"eth{index}"))


def _mount_line(source: Path, target: str, read_only: bool, kind: str = "dir") -> str:
    options = ",".join(["bind", *(["ro"] if read_only else []), f"create={kind}"])
    return f"lxc.mount.entry = {source} {target.lstrip('/')} none {options} 0 0"


def _mp_lines(vmid: int, key: str, value: str, owner: int) -> list[str]:
    mp = property_string(value, "volume")
    volume, target = mp.get("volume", ""), mp.get("mp", "")
    if not target.startswith("/"):
        raise GuestError(f"{key}: missing or relative mount point 'mp={target}'")
    if volume.startswith("/"):
        source = node_path(volume)
        if not source.exists():
            raise GuestError(f"{key}: mount point source '{volume}' does not exist on {NODE.name}")
    else:
        source = volume_dir(volume) / "data"
        if not source.exists():
            source.mkdir(parents=True)
            os.chown(source, owner, owner)
    return [_mount_line(source, target, flag(mp.get("ro")))]


def _raw_line(key: str, value: str, copies: Path) -> str:
    """A raw lxc.* line of the PVE config; mount sources are paths on the node. Lab only: a device
    node in pve1's own /dev (its nvidia-modprobe made it there) cannot be bind-mounted from outside
    pve1's mount namespace (the kernel's do_loopback refuses a source mount of another namespace:
    EINVAL), so the guest binds a copy with the same numbers, mode and owner, made in ``copies``."""
    if key == "lxc.mount.entry" and value.startswith("/"):
        source, _, rest = value.partition(" ")
        value = f"{_device_copy(node_path(source), source, copies)} {rest}"
    return f"{key} = {value}"


def _device_copy(found: Path, source: str, copies: Path) -> Path:
    try:
        info = os.stat(found)
    except OSError:
        return found  # LXC reports it (or skips it, for an optional entry), as with any missing source
    if not source.startswith("/dev/") or not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)):
        return found
    copy = copies / source.lstrip("/")
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.unlink(missing_ok=True)
    os.mknod(copy, info.st_mode, info.st_rdev)
    os.chmod(copy, stat.S_IMODE(info.st_mode))
    os.chown(copy, info.st_uid, info.st_gid)
    return copy


def build_config(vmid: int, config_text: str) -> str:
    """The LXC config of guest ``vmid`` from its PVE config (see the module docstring); makes
    what it names on the way: devN copies in the passthrough dir, mpN volume dirs."""
    options, raw = parse_config(config_text, vmid)
    record = _record(vmid)
    unprivileged = flag(options.get("unprivileged"))
    if unprivileged != record["unprivileged"]:
        raise GuestError(f"CT {vmid}: 'unprivileged' differs from the volume it was created with")
    shift = UID_SHIFT if unprivileged else 0
    rootfs_volume = property_string(options.get("rootfs", ""), "volume").get("volume", "")
    if rootfs_volume != record["rootfs"]:
        raise GuestError(f"CT {vmid}: rootfs volume '{rootfs_volume}' is not {record['rootfs']}")
    hostname = options.get("hostname", f"CT{vmid}")
    lines = [f"# Written by the lab's guestd from /etc/pve/lxc/{vmid}.conf on every start."]
    upper = volume_dir(rootfs_volume) / "upper"
    lines += container.base_lines(name(vmid), hostname, f"overlay:{record['lower']}:{upper}")
    for key in sorted((k for k in options if NET_KEY.match(k)), key=lambda k: int(k[3:])):
        lines += _net_lines(vmid, int(key[3:]), options[key])
    memory = int(options.get("memory", "512")) * 1024 * 1024
    swap = int(options.get("swap", "512")) * 1024 * 1024
    lines += [f"lxc.cgroup2.memory.max = {memory}", f"lxc.cgroup2.memory.swap.max = {swap}"]
    cores = min(int(options.get("cores", os.cpu_count())), os.cpu_count())
    lines += ["# lab only: the v1 controllers of this host (PVE 7+ writes the cgroup2 lines above)"]
    lines += [f"lxc.cgroup.memory.limit_in_bytes = {memory}", f"lxc.cgroup.cpuset.cpus = 0-{cores - 1}"]
    if "cpulimit" in options and float(options["cpulimit"]) > 0:
        lines.append(f"lxc.cgroup2.cpu.max = {int(float(options['cpulimit']) * 100000)} 100000")
    if unprivileged and not any(key == "lxc.idmap" for key, _ in raw):
        lines += [f"lxc.idmap = {kind} 0 {UID_SHIFT} {ID_COUNT}" for kind in "ug"]
    lines += lxcfs.mount_entries() if lxcfs.mounted() else []
    lines.append(container.driver_proc_entry())
    for key in sorted((k for k in options if MP_KEY.match(k)), key=lambda k: int(k[2:])):
        lines += _mp_lines(vmid, key, options[key], shift)
    idmap = devn.id_map(unprivileged, [value for key, value in raw if key == "lxc.idmap"])
    lines += devn.prepare(guest_dir(vmid) / "passthrough", options, node_path, idmap)
    lines += [_raw_line(key, value, guest_dir(vmid) / "raw-devices") for key, value in raw]
    lines += container.cgroup_v1_twins([line for line in lines if line.startswith("lxc.cgroup2.devices.")])
    return "\n".join(lines) + "\n"


def _identity_files(hostname: str) -> dict[str, tuple[bytes, int]]:
    """What PVE's setup code writes into the container at every start."""
    hosts = rootfs.hosts_file() + f"# --- BEGIN PVE ---\n127.0.1.1 {hostname}\n# --- END PVE ---\n"
    return {"/etc/hostname": (f"{hostname}\n".encode(), 0o644), "/etc/hosts": (hosts.encode(), 0o644)}


# -- the backend's actions --------------------------------------------------------------------


def create(vmid: int, config: dict, template_volid: str, rootfs_volume: str, ssh_public_keys: str | None) -> None:
    """Allocate the rootfs volume over the cached rootfs (our only template), with new SSH
    host keys, root's authorized_keys from ``ssh-public-keys`` and the lab's user-space GPU
    driver (nvidia-smi), like a template with the driver installed."""
    if (guest_dir(vmid) / "guest.json").exists():  # one lxcpath for every node of the lab
        raise GuestError(
            f"CT {vmid} already exists on {node_of(vmid)}: the lab's nodes keep vmids unique, as a cluster does"
        )
    volume = volume_dir(rootfs_volume)
    if volume.exists():
        raise GuestError(f"volume '{rootfs_volume}' already exists")
    lower = rootfs.rootfs_dir()
    if not lower.is_dir():
        raise GuestError("the lab's rootfs is missing; run `python -m lab up`")
    unprivileged = flag(str(config.get("unprivileged", "0")))
    if unprivileged:
        lower = shifted_rootfs(lower)
    owner = UID_SHIFT if unprivileged else 0
    upper = volume / "upper"
    files = {
        "/root/.ssh/authorized_keys": ((ssh_public_keys or "").encode(), 0o600),
        "/etc/pip.conf": (rootfs.PIP_CONF.encode(), 0o644),
        "/etc/apt/sources.list": (apt_repo.APT_SOURCES.encode(), 0o644),
        "/usr/bin/nvidia-smi": ((layout.SIM_DIR / "nvidia_smi.py").read_bytes(), 0o755),
        f"{node.SIM_CONFIG_DIR}/driver-version": (f"{layout.GUEST_DRIVER_VERSION}\n".encode(), 0o644),
        f"{node.SIM_CONFIG_DIR}/faults.yaml": (b"", 0o644),
    }
    container.write_tree(upper, files, owner)
    (volume / "work").mkdir()  # LXC's overlay workdir; an unprivileged start cannot create it
    os.chown(volume / "work", owner, owner)
    (upper / "root/.ssh").chmod(0o700)
    (upper / "etc/ssh").mkdir(exist_ok=True)
    os.chown(upper / "etc/ssh", owner, owner)
    run(["ssh-keygen", "-A", "-f", str(upper)])  # new host keys, as PVE makes at create
    for key in (upper / "etc/ssh").iterdir():
        os.chown(key, owner, owner)
    (volume / "TEMPLATE").write_text(template_volid + "\n")
    guest_dir(vmid).mkdir(parents=True, exist_ok=True)
    record = {"rootfs": rootfs_volume, "lower": str(lower), "unprivileged": unprivileged, "node": NODE.name}
    (guest_dir(vmid) / "guest.json").write_text(json.dumps(record))


def node_config(vmid: int) -> str:
    """The guest's PVE config as the node holds it: /etc/pve/nodes/<node>/lxc/<vmid>.conf in the
    backing dir of the node's pmxcfs (lab/pmxcfs.py), read without following a link, never the
    caller's copy (a request on guestd's socket is no more trusted than the node's root)."""
    relative = f"nodes/{NODE.name}/lxc/{int(vmid)}.conf"
    try:
        return beneath.read_beneath(NODE.etc_pve, relative, f"CT {vmid}'s config")
    except FileNotFoundError:
        raise GuestError(f"CT {vmid}: no /etc/pve/{relative}") from None
    except beneath.LinkError as error:
        raise GuestError(str(error)) from None


def start(vmid: int) -> None:
    """Start guest ``vmid`` from its config in /etc/pve (node_config)."""
    if status(vmid) == "running":
        raise GuestError(f"CT {vmid} already running")
    config_text = node_config(vmid)
    config = build_config(vmid, config_text)
    options, _ = parse_config(config_text, vmid)
    record = _record(vmid)
    upper = volume_dir(record["rootfs"]) / "upper"
    owner = UID_SHIFT if record["unprivileged"] else 0
    for path in ("etc/hostname", "etc/hosts"):
        (upper / path).unlink(missing_ok=True)
    container.write_tree(upper, _identity_files(options.get("hostname", f"CT{vmid}")), owner)
    for veth in container.veth_pairs(name(vmid)):  # left by a start that was killed
        network.delete_link(veth)
    container.remove_empty_cgroups(name(vmid))
    container.start(name(vmid), config)


def refresh_apt_source(vmid: int) -> None:
    """A running guest's /etc/apt/sources.list made the lab's (what create writes now): a guest
    created before the lab had its apt repository still names the Debian mirror it cannot reach."""
    pid = container.init_pid(name(vmid))
    target = Path(f"/proc/{pid}/root/etc/apt/sources.list")
    if pid is None or target.is_symlink() or (target.exists() and target.read_bytes() == apt_repo.APT_SOURCES.encode()):
        return
    owner = UID_SHIFT if _record(vmid)["unprivileged"] else 0
    target.write_text(apt_repo.APT_SOURCES)
    os.chown(target, owner, owner)
    target.chmod(0o644)


def status(vmid: int) -> str:
    return "running" if container.state(name(vmid)) == "RUNNING" else "stopped"


def stop(vmid: int) -> None:
    if status(vmid) == "running":
        container.lxc("lxc-stop", name(vmid), "--kill")
    container.remove_empty_cgroups(name(vmid))


def shutdown(vmid: int, timeout: int) -> None:
    """A clean shutdown (SIGPWR to the container's systemd), at most ``timeout`` seconds."""
    if status(vmid) != "running":
        return
    result = container.lxc("lxc-stop", name(vmid), "--nokill", "--timeout", str(timeout), check=False)
    if status(vmid) == "running":
        raise GuestError(f"shutdown of CT {vmid} timed out after {timeout} s {result.stderr.strip()}")
    container.remove_empty_cgroups(name(vmid))


# The cgroup files of the keys vmconfig_hotplug_pending changes (LXC/CGroup.pm change_memory_limit,
# change_cpu_quota, change_cpu_shares), each with the PVE value converted: v2, and the v1 files
# build_config writes on a host without the unified hierarchy (swap has none there).
_CGROUP_V2 = {
    "memory": ("memory.max", lambda v: str(int(v) * 1024 * 1024)),
    "swap": ("memory.swap.max", lambda v: str(int(v) * 1024 * 1024)),
    "cpulimit": ("cpu.max", lambda v: f"{int(float(v) * 100000)} 100000" if float(v) > 0 else "max 100000"),
    "cpuunits": ("cpu.weight", lambda v: v),
}
_CGROUP_V1 = {
    "memory": ("memory.limit_in_bytes", lambda v: str(int(v) * 1024 * 1024)),
    "cpulimit": ("cpu.cfs_quota_us", lambda v: str(int(float(v) * 100000)) if float(v) > 0 else "-1"),
    "cpuunits": ("cpu.shares", lambda v: v),
}
_CGROUP_DEFAULTS = {"swap": "0", "cpulimit": "0", "cpuunits": "100"}


def _unified_cgroup() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def hotplug(vmid: int, key: str, old: str | None, new: str | None) -> None:
    """A change to a running guest, as pve-container's vmconfig_hotplug_pending makes it
    (src/PVE/LXC/Config.pm at 94f5585), as far as the lab can: the cgroup limits (lxc-cgroup);
    netN ip=/gw= on the same name, hwaddr and bridge (LXC.pm update_net -> update_ipconfig, ip in
    the guest's network namespace); a new devN (lxc-device add: the node in the guest and its
    cgroup rule, where PVE bind-mounts a node it made: device_passthrough_hotplug). Anything else
    (a new or removed netN, a new mpN) is refused: the guest would not have what its config says."""
    lxc_name = name(vmid)
    if key in _CGROUP_V2:
        files = _CGROUP_V2 if _unified_cgroup() else _CGROUP_V1
        if key in files:
            cgroup_file, convert = files[key]
            value = convert(new if new is not None else _CGROUP_DEFAULTS[key])
            container.lxc("lxc-cgroup", lxc_name, cgroup_file, value)
    elif key.startswith("dev") and old is None and new is not None:
        device = property_string(new, "path")
        container.lxc("lxc-device", lxc_name, "add", device["path"])
        owner = f"{device.get('uid', '0')}:{device.get('gid', '0')}"
        script = f"chown {shlex.quote(owner)} {shlex.quote(device['path'])}"
        script += f" && chmod {shlex.quote(device['mode'])} {shlex.quote(device['path'])}" if "mode" in device else ""
        run(container.attach_argv(lxc_name, ["sh", "-c", script]))
    elif NET_KEY.match(key) and old is not None and new is not None:
        before, after = property_string(old, "name"), property_string(new, "name")
        if any(before.get(k) != after.get(k) for k in ("name", "hwaddr", "bridge")):
            raise GuestError(f"{key}: the lab hotplugs only ip= and gw= (name, hwaddr and bridge stay)")
        device = shlex.quote(after.get("name", "eth0"))
        address = after.get("ip") if after.get("ip") not in (None, "dhcp", "manual") else None
        script = [f"ip -4 address flush dev {device}"]
        script += [f"ip -4 address add {shlex.quote(address)} dev {device}"] if address else []
        script += [f"ip -4 route replace default via {shlex.quote(after['gw'])}"] if after.get("gw") else []
        run(container.attach_argv(lxc_name, ["sh", "-c", " && ".join(script)]))
    else:
        raise GuestError(f"{key}: the lab cannot hotplug this into a running container")


def destroy(vmid: int) -> None:
    """The container, its volumes (rootfs, mpN, snapshots) on its node and its runtime dir."""
    try:
        volumes = [_record(vmid)["rootfs"]]
    except GuestError:
        volumes = []
    on = layout.NODES.get(node_of(vmid), NODE)
    container.destroy(name(vmid))
    for volid in volumes:
        shutil.rmtree(volume_dir(volid, on), ignore_errors=True)
    for leftover in on.volumes_dir.glob(f"*/*-{vmid}-disk-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _snapshot_dir(vmid: int, snapshot: str) -> Path:
    if not re.match(r"^[A-Za-z][A-Za-z0-9_-]*$", snapshot):
        raise GuestError(f"invalid snapshot name '{snapshot}'")
    return volume_dir(_record(vmid)["rootfs"]) / "snapshots" / snapshot


def snapshot(vmid: int, snapshot_name: str) -> None:
    """Copy the rootfs volume's upper dir (frozen meanwhile when running, as a storage
    snapshot is atomic); cp -a keeps owners, device nodes and overlay xattrs."""
    target = _snapshot_dir(vmid, snapshot_name)
    if target.exists():
        raise GuestError(f"snapshot '{snapshot_name}' of CT {vmid} already exists on the volume")
    target.parent.mkdir(parents=True, exist_ok=True)
    upper = volume_dir(_record(vmid)["rootfs"]) / "upper"
    running = status(vmid) == "running"
    if running:
        container.lxc("lxc-freeze", name(vmid))
    try:
        run(["cp", "-a", str(upper), str(target)])
    finally:
        if running:
            container.lxc("lxc-unfreeze", name(vmid))


def rollback(vmid: int, snapshot_name: str) -> None:
    source = _snapshot_dir(vmid, snapshot_name)
    if not source.is_dir():
        raise GuestError(f"snapshot '{snapshot_name}' of CT {vmid} does not exist on the volume")
    if status(vmid) == "running":
        raise GuestError(f"CT {vmid} is running; rollback needs it stopped")
    upper = volume_dir(_record(vmid)["rootfs"]) / "upper"
    shutil.rmtree(upper)
    run(["cp", "-a", str(source), str(upper)])


def delete_snapshot(vmid: int, snapshot_name: str) -> None:
    shutil.rmtree(_snapshot_dir(vmid, snapshot_name), ignore_errors=True)


def exec_argv(vmid: int, command: list[str]) -> list[str]:
    if status(vmid) != "running":
        raise GuestError(f"CT {vmid} not running")
    return container.attach_argv(name(vmid), command)


def run_attached(vmid: int, command: list[str], fds: list[int]) -> int:
    """Run ``command`` in the guest with the caller's stdin/stdout/stderr (passed over the
    socket), like lxc-attach from pct; returns its exit code."""
    argv = exec_argv(vmid, command)
    return subprocess.run(argv, stdin=fds[0], stdout=fds[1], stderr=fds[2]).returncode


# -- the lab's view ---------------------------------------------------------------------------


def known() -> dict[int, str]:
    """vmid -> hostname of every guest guestd created (from its LXC dirs)."""
    guests = {}
    for record in layout.LXC_PATH.glob("*/guest.json"):
        vmid = int(record.parent.name)
        config = record.parent / "config"
        text = config.read_text() if config.exists() else ""
        match = re.search(r"^lxc\.uts\.name = (\S+)$", text, re.M)
        guests[vmid] = match.group(1) if match else f"CT{vmid}"
    return guests


def resolve(host: str) -> str | None:
    """The LXC name of a guest given by vmid or hostname, None when there is none. A hostname two
    guests share (the scale lab's sglang1, vmid 201, beside the default lab's, 129, in one slot)
    names the lowest vmid: give the vmid for the other."""
    for vmid, hostname in sorted(known().items()):
        if host in (str(vmid), hostname):
            return name(vmid)
    return None


def node_of(vmid: int) -> str:
    """The node that created guest ``vmid`` (its record; a record from before pve2 existed: pve1)."""
    try:
        return str(_record(vmid).get("node", layout.NODE))
    except GuestError:
        return NODE.name


def destroy_all() -> None:
    for vmid in known():
        destroy(vmid)
    for each in layout.NODES.values():
        shutil.rmtree(each.volumes_dir, ignore_errors=True)
