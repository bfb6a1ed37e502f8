"""The pure config diff: what a container should have vs what it will have at its next start (its
current config, GET .../config?current=1, with what waits in [pve:pending] laid over it), and
which changes a running container only takes at a restart (hotplug.py: pve-container's rules).

Property strings are compared as PVE reads them (key order and 1/on/true do not matter), keys PVE
fills in by itself (a generated MAC, type=veth) only when asked for, and only keys the toolkit
owns are ever changed or deleted. Keys that cannot change in place are refused with the reason.

>>> from sglang_pve.config.proxmox import RootFs
>>> wanted = Desired({"cores": "8", "memory": "4096"}, [], RootFs(storage="local", size_gb=8), {}, [])
>>> current = {"cores": 4, "memory": 4096, "rootfs": "local:129/vm-129-disk-0.raw,size=8G", "digest": "ab"}
>>> diff_config(wanted, current, nvidia_majors={195}).lines()
['cores: 4 -> 8']
>>> later = diff_config(wanted, current, {195}, pending={"cores": "8", "nameserver": "10.0.0.1"})
>>> later.changes, later.restart_keys
([], ['cores', 'nameserver'])
>>> later.lines()[1]
'nameserver: (unset) -> 10.0.0.1 (pending: applies at the next start)'

"""

import itertools
import re
from dataclasses import dataclass, field

from sglang_pve.config.errors import Problem
from sglang_pve.config.proxmox import RootFs
from sglang_pve.provision.desired import Desired
from sglang_pve.provision.hotplug import FASTPLUG_AT_START, stays_pending
from sglang_pve.provision.propstring import format_of, parse

# Absent from a config file, these read as PVE's default (pve-container Config.pm).
_ABSENT_MEANS = {"onboot": "0", "unprivileged": "0"}
_UNITS_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1, "T": 1024}
# Keys the toolkit owns in a container's config: set when wanted, deleted when no longer wanted.
OWNED_SCALARS = ("hostname", "cores", "memory", "swap", "onboot", "unprivileged", "net0", "features", "startup")
_DEV = re.compile(r"^dev\d+$")
# The toolkit's devN are exactly the NVIDIA nodes it passes (passthrough.nvidia_devices), known by
# their path: any other devN (an operator's /dev/dri/renderD128, /dev/fuse) is left alone, index included.
_OUR_DEVICE = re.compile(r"^/dev/nvidia(\d+|ctl|-uvm|-uvm-tools)$")
# The toolkit's mount lines are recognised by their exact shape (desired.mount_line; a conf file
# has no room for a marker: PVE reads every comment line into the description): so a mount removed
# from the data is removed from the config, and a hand-written mount entry (other options) is left alone.
_OUR_MOUNT = re.compile(r"^/\S+ \S+ none bind(,ro)?,create=dir 0 0$")


@dataclass(frozen=True)
class Change:
    key: str
    old: str | None
    new: str | None  # None: delete the key

    def line(self) -> str:
        old = self.old if self.old is not None else "(unset)"
        new = self.new if self.new is not None else "(deleted)"
        return f"{self.key}: {old} -> {new}"


@dataclass(frozen=True)
class ConfigDiff:
    changes: list[Change] = field(default_factory=list)
    raw_old: list[str] = field(default_factory=list)  # the toolkit's raw lxc lines now, "key: value"
    raw_new: list[str] = field(default_factory=list)
    resize_gb: int | None = None  # grow the root volume to this size
    refusals: list[Problem] = field(default_factory=list)
    pending: list[Change] = field(default_factory=list)  # in [pve:pending] already (anyone's), left as is
    restart_keys: list[str] = field(default_factory=list)  # what a running CT takes only at its next start
    # A deleted key with a value in [pve:pending]: a delete would leave that value to be applied at
    # start (update_pct_config only queues delete=), so it is reverted; one also in the current
    # config is deleted by a second PUT after the revert (PVE refuses both at once).
    reverted: list[str] = field(default_factory=list)
    deleted_after_revert: list[str] = field(default_factory=list)

    @property
    def raw_changed(self) -> bool:
        return self.raw_old != self.raw_new

    @property
    def empty(self) -> bool:
        return not (self.changes or self.raw_changed or self.resize_gb)

    @property
    def put_parameters(self) -> dict[str, str]:
        return {c.key: c.new for c in self.changes if c.new is not None}

    @property
    def deleted(self) -> list[str]:
        return [c.key for c in self.changes if c.new is None and c.key not in self.reverted]

    @property
    def keys(self) -> list[str]:
        return (
            [c.key for c in self.changes]
            + (["lxc"] if self.raw_changed else [])
            + (["rootfs"] if self.resize_gb else [])
        )

    def lines(self) -> list[str]:
        """Human-readable: ``key: old -> new``; raw lines as ``lxc: - line`` / ``lxc: + line``."""
        lines = [c.line() for c in self.changes]
        lines += [f"{c.line()} (pending: applies at the next start)" for c in self.pending]
        if self.resize_gb:
            lines.append(f"rootfs: size -> {self.resize_gb}G")
        if self.raw_changed:
            lines += [f"lxc: - {line}" for line in self.raw_old if line not in self.raw_new]
            lines += [f"lxc: + {line}" for line in self.raw_new if line not in self.raw_old]
        return lines


def owned_key(key: str, value: object = None) -> bool:
    """A key the toolkit sets and deletes; a devN only when it passes one of the toolkit's nodes.

    >>> owned_key("dev0", "/dev/nvidia0,mode=0666"), owned_key("dev1", "path=/dev/dri/renderD128,gid=104")
    (True, False)
    """
    if _DEV.match(key):
        return bool(_OUR_DEVICE.match(_device_path(value)))
    return key in OWNED_SCALARS or key == "rootfs"


def _device_path(value: object) -> str:
    return parse(str(value), "path").get("path", "")


def placed_devices(wanted: dict[str, str], current: dict) -> dict[str, str]:
    """``wanted`` with the toolkit's devN moved off the indexes an operator's devN hold: each of
    ours keeps the index it has now, the others take the lowest free ones.

    >>> placed_devices({"cores": "8", "dev0": "/dev/nvidia0", "dev1": "/dev/nvidiactl"}, {"dev0": "/dev/fuse"})
    {'cores': '8', 'dev1': '/dev/nvidia0', 'dev2': '/dev/nvidiactl'}
    """
    devices = [value for key, value in wanted.items() if _DEV.match(key)]
    theirs = {int(k[3:]) for k, v in current.items() if _DEV.match(k) and not owned_key(k, v)}
    if not theirs & {int(k[3:]) for k in wanted if _DEV.match(k)}:
        return wanted
    paths = {_device_path(v) for v in devices}
    held = {_device_path(v): int(k[3:]) for k, v in current.items() if owned_key(k, v) and _device_path(v) in paths}
    free = (i for i in itertools.count() if i not in theirs | set(held.values()))
    placed = {f"dev{held[_device_path(v)] if _device_path(v) in held else next(free)}": v for v in devices}
    return {k: v for k, v in wanted.items() if not _DEV.match(k)} | placed


def owned_raw_line(key: str, value: str, nvidia_majors: set[int]) -> bool:
    """Raw lines the toolkit manages (and may remove): mount entries of its own shape or of a
    /dev/nvidia* node, device rules of an NVIDIA major. Every other raw line is left alone."""
    if key == "lxc.mount.entry":
        fields = value.split()
        return bool(_OUR_MOUNT.match(value)) or (len(fields) > 1 and fields[1].startswith("dev/nvidia"))
    if key == "lxc.cgroup2.devices.allow":
        match = re.match(r"^c (\d+):", value)
        return match is not None and int(match.group(1)) in nvidia_majors
    return False


def same(key: str, wanted: str, current: object) -> bool:
    if current is None:
        current = _ABSENT_MEANS.get(key)
    if current is None:
        return False
    fmt = format_of(key)
    if fmt is None:
        return str(current) == wanted
    wanted_values = fmt.normalized(wanted)
    compared = set(wanted_values) | (set(fmt.normalized(str(current))) - fmt.filled_by_pve)
    return fmt.normalized(str(current), compared) == wanted_values


def _size_gb(text: str) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text)
    return float(match.group(1)) * _UNITS_GB[match.group(2) or "G"] if match else None


def _rootfs(wanted: RootFs, current: str | None) -> tuple[int | None, list[Problem]]:
    """(size to grow to, refusals) for the root volume ``storage:volume,size=200G``."""
    if current is None:
        return None, []
    volume, _, options = current.partition(",")
    storage = volume.split(":", 1)[0]
    problems = []
    if storage != wanted.storage:
        problems.append(
            Problem(
                "container.rootfs.storage",
                wanted.storage,
                f"the root volume is on storage {storage}; moving it is not a config change",
                f"move it first (pct move-volume <vmid> rootfs {wanted.storage}) or set storage back to {storage}",
            )
        )
    size = _size_gb(dict(o.split("=", 1) for o in options.split(",") if "=" in o).get("size", ""))
    if size is not None and size > wanted.size_gb:
        problems.append(
            Problem(
                "container.rootfs.size_gb",
                wanted.size_gb,
                f"the root volume already has {size:g} GB and volumes cannot shrink",
                f"set size_gb to at least {size:g}",
            )
        )
    grow = wanted.size_gb if size is not None and size < wanted.size_gb else None
    return grow, problems


def diff_config(
    wanted: Desired, current: dict, nvidia_majors: set[int], pending: dict[str, str | None] | None = None
) -> ConfigDiff:
    """Compare with the current config (GET .../config?current=1) with `pending` laid over it
    (Node.pending: {key: value, None: deleted}); of the raw lines only the toolkit's own count
    (owned_raw_line with the node's NVIDIA device majors)."""
    pending = pending or {}
    running_with = current
    current = {k: v for k, v in current.items() if pending.get(k, "") is not None} | {
        k: v for k, v in pending.items() if v is not None
    }
    config = placed_devices(wanted.config, current)
    changes = [
        Change(k, None if current.get(k) is None else str(current[k]), v)
        for k, v in config.items()
        if not same(k, v, current.get(k))
    ]
    changes += [
        Change(k, str(current[k]), None)
        for k in sorted(current, key=_natural)
        if owned_key(k, current[k])
        and k != "rootfs"
        and k not in config
        and (k not in OWNED_SCALARS or k in ("features", "startup"))
    ]
    refusals = []
    if any(c.key == "unprivileged" for c in changes):
        old = "privileged" if _ABSENT_MEANS["unprivileged"] == str(current.get("unprivileged", "0")) else "unprivileged"
        refusals.append(
            Problem(
                "container.unprivileged",
                wanted.config["unprivileged"] == "1",
                f"the container is {old}; Proxmox cannot change that in place (every file's owner "
                "would have to be shifted)",
                f"set unprivileged back to {old == 'unprivileged'}, or "
                "recreate the container (vzdump, then restore with --unprivileged)",
            )
        )
    grow, problems = _rootfs(wanted.rootfs, current.get("rootfs"))
    raw_current = [(k, v) for k, v in current.get("lxc", []) if owned_raw_line(k, v, nvidia_majors)]
    raw_new = [f"{k}: {v}" for k, v in wanted.raw_lines]
    raw_old = [f"{k}: {v}" for k, v in raw_current]
    changed = {c.key for c in changes}
    left = [Change(k, _text(running_with.get(k)), v) for k, v in sorted(pending.items()) if k not in changed]
    reverted = [c.key for c in changes if c.new is None and pending.get(c.key) is not None]
    return ConfigDiff(
        changes=changes,
        raw_old=raw_old,
        raw_new=raw_new,
        resize_gb=grow,
        refusals=refusals + problems,
        pending=left,
        reverted=reverted,
        deleted_after_revert=[k for k in reverted if running_with.get(k) is not None],
        restart_keys=sorted(
            {c.key for c in left}
            | {c.key for c in changes if _at_start(c.key, _text(running_with.get(c.key)), c.new)}
            | ({"lxc"} if raw_old != raw_new else set()),
            key=_natural,
        ),
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _at_start(key: str, running_with: str | None, new: str | None) -> bool:
    """Whether a running CT takes this change only at its next start: it stays in [pve:pending]
    after the PUT (a value equal to the running one is dropped from there: pve-guest-common
    AbstractConfig.pm cleanup_pending), or it is written at once but read only at start."""
    if new == running_with:
        return False
    return key in FASTPLUG_AT_START or (
        stays_pending(key, running_with, new) and (new is not None or running_with is not None)
    )


def creation_diff(wanted: Desired) -> ConfigDiff:
    """What creating the container sets: every wanted key and raw line."""
    return ConfigDiff(
        changes=[Change(k, None, v) for k, v in wanted.config.items()],
        raw_new=[f"{k}: {v}" for k, v in wanted.raw_lines],
    )


def _natural(key: str) -> tuple[str, int]:
    match = re.match(r"^(\D+)(\d*)$", key)
    return (match.group(1), int(match.group(2) or -1)) if match else (key, -1)
