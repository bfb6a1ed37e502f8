"""devN passthrough as pve-container does it when a container starts (guestd, lab/guests.py).

Followed from proxmox/pve-container (https://github.com/proxmox/pve-container, read at 94f5585):

- src/PVE/LXC/Config.pm: the devN format, $dev_desc (``path`` the default key, format
  pve-lxc-dev-string: verify_lxc_dev_string wants /dev/ first and no /./ or /../; ``mode``
  0[0-7]{3}; ``uid``, ``gid`` integers >= 0; ``deny-write`` boolean), parse_device ("Path has
  to be defined"), dev0..dev255 ($MAX_DEVICES); property strings as proxmox/pve-common
  src/PVE/JSONSchema.pm parse_property_string and parse_boolean read them.
- src/PVE/LXC.pm update_lxc_config: per device, PVE::LXC::Tools::get_device_mode_and_rdev
  (src/PVE/LXC/Tools.pm: "Device <path> does not exist", "<path> is not a device"), then
  ``lxc.cgroup2.devices.allow = <b|c> MAJ:MIN rw`` (``r`` with deny-write, plus
  ``lxc.cgroup2.devices.deny = <b|c> MAJ:MIN w``).
- src/lxc-pve-prestart-hook: the passthrough dir /var/lib/lxc/<vmid>/passthrough; for each
  device PVE::LXC::create_passthrough_device_node (src/PVE/LXC.pm): mknod <dir><path> with the
  host node's mode and rdev, chmod to ``mode`` (default 0660), chown to ``uid``/``gid`` (default
  0) mapped to the host by map_ct_uid_to_host/map_ct_gid_to_host through the id map
  (parse_id_maps); then <dir>/devices, one ``<b|c>:MAJ:MIN:<path>`` line per device.
- src/lxc-pve-autodev-hook, set as lxc.hook.autodev by src/lxc-pve.conf: lab/autodev_hook.sh,
  the same steps in sh, run by LXC at the same moment (after every lxc.mount.entry).

Lab only: the passthrough dir is a plain dir in the guest's LXC dir, emptied at each start (PVE
mounts an 8k tmpfs there and unmounts it at stop); the devices are taken in index order (PVE
walks the config's Perl hash, in no fixed order); ``path`` is stat'ed where the lab host
reaches the node's path (lab/guests.py node_path).
"""

import os
import re
import shlex
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.shell import LabError

DEV_KEY = re.compile(r"^dev(\d+)$")
MAX_DEVICES = 256
DEFAULT_MODE = 0o660
HOOK = Path(__file__).with_name("autodev_hook.sh")
# the id map of an unprivileged container without lxc.idmap lines (parse_id_maps)
DEFAULT_ID_MAP = (("u", 0, 100000, 65536), ("g", 0, 100000, 65536))


class DeviceError(LabError):
    """A devN entry pve-container refuses; the message is PVE's."""


@dataclass(frozen=True)
class Device:
    key: str
    path: str
    mode: int = DEFAULT_MODE
    uid: int = 0
    gid: int = 0
    deny_write: bool = False


def parse_boolean(value: str) -> bool | None:
    """pve-common JSONSchema.pm parse_boolean.

    >>> parse_boolean("on"), parse_boolean("False"), parse_boolean("2")
    (True, False, None)
    """
    if re.fullmatch(r"1|on|yes|true", value, re.I):
        return True
    if re.fullmatch(r"0|off|no|false", value, re.I):
        return False
    return None


def valid_device_path(path: str) -> bool:
    """Config.pm verify_lxc_dev_string: /dev/ first, no /./ or /../ (nor a trailing /. or /..).

    >>> [valid_device_path(p) for p in ("/dev/nvidia0", "/dev/dri/card0", "/dev/../etc", "/dev/.", "/tmp/x")]
    [True, True, False, False, False]
    """
    return path.startswith("/dev/") and not re.search(r"/\.\.?(?:/|$)", path)


def parse_device(key: str, value: str) -> Device:
    """A devN value, ``[path=]PATH[,mode=0NNN][,uid=N][,gid=N][,deny-write=BOOL]``.

    >>> parse_device("dev0", "/dev/nvidia0,mode=0666")
    Device(key='dev0', path='/dev/nvidia0', mode=438, uid=0, gid=0, deny_write=False)
    >>> parse_device("dev1", "path=/dev/zero,uid=5,deny-write=yes").deny_write
    True
    >>> parse_device("dev2", "/dev/zero,mode=666")
    Traceback (most recent call last):
    lab.devn.DeviceError: unable to parse value of 'dev2' - format error: mode: value does not match the regex pattern
    """
    fields: dict[str, str] = {}

    def fail(message: str) -> DeviceError:
        return DeviceError(f"unable to parse value of '{key}' - {message}")

    for part in value.split(","):
        if not part.strip():
            continue
        name, sep, item = part.partition("=")
        if sep and name and item:
            if name in fields:
                raise fail(f"duplicate key in comma-separated list property: {name}")
            if name not in ("path", "mode", "uid", "gid", "deny-write"):
                raise fail(f"invalid key in comma-separated list property: {name}")
            fields[name] = item
        elif not sep:
            if "path" in fields:
                raise fail("duplicate key in comma-separated list property: path")
            fields["path"] = part
        else:
            raise fail("missing key in comma-separated list property")
    errors = []
    if "path" in fields and not valid_device_path(fields["path"]):
        errors.append(f"path: invalid format - {fields['path']} is not a valid device path")
    if "mode" in fields and not re.fullmatch(r"0[0-7]{3}", fields["mode"]):
        errors.append("mode: value does not match the regex pattern")
    for name in ("uid", "gid"):
        if name in fields and not re.fullmatch(r"\d+", fields[name]):
            errors.append(f"{name}: type check ('integer') failed - got '{fields[name]}'")
    deny_write = parse_boolean(fields.get("deny-write", "0"))
    if deny_write is None:
        errors.append(f"deny-write: type check ('boolean') failed - got '{fields['deny-write']}'")
    if errors:
        raise fail("format error: " + "; ".join(errors))
    if "path" not in fields:
        raise DeviceError("Path has to be defined")
    return Device(
        key=key,
        path=fields["path"],
        mode=int(fields.get("mode", oct(DEFAULT_MODE)), 8),
        uid=int(fields.get("uid", 0)),
        gid=int(fields.get("gid", 0)),
        deny_write=bool(deny_write),
    )


def config_devices(options: dict[str, str]) -> list[Device]:
    """Every devN of a config (Config.pm foreach_passthrough_device), by index."""
    keys = sorted((key for key in options if DEV_KEY.match(key)), key=lambda key: int(key[3:]))
    for key in keys:
        if int(key[3:]) >= MAX_DEVICES:
            raise DeviceError(f"unable to parse config: {key} is not a known option (dev0..dev{MAX_DEVICES - 1})")
    return [parse_device(key, options[key]) for key in keys]


def id_map(unprivileged: bool, idmap_lines: list[str]) -> list[tuple[str, int, int, int]]:
    """LXC.pm parse_id_maps: the config's lxc.idmap values, else the default for unprivileged.

    >>> id_map(True, []) == list(DEFAULT_ID_MAP), id_map(False, ["u 0 200000 1000"])
    (True, [('u', 0, 200000, 1000)])
    """
    mapping = []
    for value in idmap_lines:
        match = re.fullmatch(r"([ug])\s+(\d+)\s+(\d+)\s+(\d+)\s*", value)
        if not match:
            raise DeviceError(f"failed to parse idmap: {value}")
        mapping.append((match.group(1), *(int(match.group(i)) for i in (2, 3, 4))))
    return mapping or (list(DEFAULT_ID_MAP) if unprivileged else [])


def map_to_host(value: int, mapping: list[tuple[str, int, int, int]], kind: str) -> int:
    """LXC.pm map_ct_id_to_host: an id inside a mapped range moves with it, any other stays.

    >>> map_to_host(5, list(DEFAULT_ID_MAP), "u"), map_to_host(70000, list(DEFAULT_ID_MAP), "g")
    (100005, 70000)
    """
    for entry_kind, inside, host, length in mapping:
        if entry_kind == kind and inside <= value < inside + length:
            return host - inside + value
    return value


def device_numbers(path: str, host_path: Path) -> tuple[int, int]:
    """Tools.pm get_device_mode_and_rdev: (st_mode, st_rdev) of a block or character node."""
    try:
        info = os.stat(host_path)
    except FileNotFoundError:
        raise DeviceError(f"Device {path} does not exist") from None
    except OSError:
        raise DeviceError(f"Error accessing device {path}") from None
    if not (stat.S_ISBLK(info.st_mode) or stat.S_ISCHR(info.st_mode)):
        raise DeviceError(f"{path} is not a device")
    return info.st_mode, info.st_rdev


def kind_char(mode: int) -> str:
    return "b" if stat.S_ISBLK(mode) else "c"


def cgroup_lines(device: Device, mode: int, rdev: int) -> list[str]:
    """update_lxc_config's lines for one device.

    >>> cgroup_lines(Device("dev0", "/dev/zero", deny_write=True), stat.S_IFCHR, os.makedev(1, 5))
    ['lxc.cgroup2.devices.allow = c 1:5 r', 'lxc.cgroup2.devices.deny = c 1:5 w']
    """
    number = f"{kind_char(mode)} {os.major(rdev)}:{os.minor(rdev)}"
    lines = [f"lxc.cgroup2.devices.allow = {number} {'r' if device.deny_write else 'rw'}"]
    return lines + ([f"lxc.cgroup2.devices.deny = {number} w"] if device.deny_write else [])


def create_passthrough_node(
    passthrough_dir: Path, device: Device, mode: int, rdev: int, mapping: list[tuple[str, int, int, int]]
) -> Path:
    """LXC.pm create_passthrough_device_node: mknod, chmod (the umask filters mknod's mode),
    chown through the id map."""
    node = Path(f"{passthrough_dir}{device.path}")
    node.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(node, mode, rdev)
    except OSError as error:
        raise DeviceError(f"failed to mknod {node}: {error.strerror}") from None
    os.chmod(node, device.mode)
    os.chown(node, map_to_host(device.uid, mapping, "u"), map_to_host(device.gid, mapping, "g"))
    return node


def device_list(entries: list[tuple[str, int, int]]) -> str:
    """The prestart hook's <passthrough dir>/devices: ``<b|c>:MAJ:MIN:<path>`` per device.

    >>> device_list([("/dev/nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))])
    'c:195:0:/dev/nvidia0\\n'
    """
    return "".join(f"{kind_char(mode)}:{os.major(rdev)}:{os.minor(rdev)}:{path}\n" for path, mode, rdev in entries)


def prepare(
    passthrough_dir: Path,
    options: dict[str, str],
    node_path: Callable[[str], Path],
    mapping: list[tuple[str, int, int, int]],
) -> list[str]:
    """What a start does for the devN of ``options``: update_lxc_config's cgroup lines and the
    autodev hook (PVE sets it for every container through src/lxc-pve.conf), returned; the
    prestart hook's nodes and device list in ``passthrough_dir``, made afresh."""
    devices = config_devices(options)
    found = [(device, *device_numbers(device.path, node_path(device.path))) for device in devices]
    lines = [line for device, mode, rdev in found for line in cgroup_lines(device, mode, rdev)]
    shutil.rmtree(passthrough_dir, ignore_errors=True)
    passthrough_dir.mkdir(parents=True)
    for device, mode, rdev in found:
        create_passthrough_node(passthrough_dir, device, mode, rdev, mapping)
    if found:  # (the prestart hook writes no list when there is no device)
        (passthrough_dir / "devices").write_text(device_list([(d.path, mode, rdev) for d, mode, rdev in found]))
    return [*lines, f"lxc.hook.autodev = /bin/sh {shlex.quote(str(HOOK))}"]
