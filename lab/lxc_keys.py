"""Which raw lxc.* keys a PVE container config may carry: pve-container's src/PVE/LXC/Config.pm
($valid_lxc_conf_keys, $deprecated_lxc_conf_keys, is_valid_lxc_conf_key;
https://github.com/proxmox/pve-container, read at 94f5585). update_lxc_config (src/PVE/LXC.pm)
then copies every accepted one verbatim, in config order, as ``KEY = VALUE``.
"""

import sys

# a value of 1 in Config.pm; a string is the error PVE reports for a key it refuses
VALID = {
    **dict.fromkeys(
        (
            "lxc.apparmor.profile lxc.apparmor.allow_incomplete lxc.apparmor.allow_nesting lxc.apparmor.raw"
            " lxc.selinux.context lxc.include lxc.arch lxc.uts.name lxc.signal.halt lxc.signal.reboot"
            " lxc.signal.stop lxc.init.cmd lxc.init.cwd lxc.init.uid lxc.init.gid lxc.init.groups lxc.pty.max"
            " lxc.console.logfile lxc.console.path lxc.tty.max lxc.devtty.dir lxc.hook.autodev lxc.autodev"
            " lxc.kmsg lxc.mount.fstab lxc.mount.entry lxc.mount.auto lxc.rootfs.mount lxc.cap.drop"
            " lxc.cap.keep lxc.seccomp.profile lxc.seccomp.notify.proxy lxc.seccomp.notify.cookie lxc.idmap"
            " lxc.hook.pre-start lxc.hook.pre-mount lxc.hook.mount lxc.hook.start lxc.hook.stop"
            " lxc.hook.post-stop lxc.hook.clone lxc.hook.destroy lxc.hook.version lxc.log.level lxc.log.file"
            " lxc.start.auto lxc.start.delay lxc.start.order lxc.group lxc.environment"
            " lxc.environment.runtime lxc.environment.hooks lxc.sysctl.fs.mqueue lxc.sysctl.kernel.msgmax"
            " lxc.sysctl.kernel.msgmnb lxc.sysctl.kernel.msgmni lxc.sysctl.kernel.sem lxc.sysctl.kernel.shmall"
            " lxc.sysctl.kernel.shmmax lxc.sysctl.kernel.shmmni lxc.sysctl.kernel.shm_rmid_forced"
        ).split(),
        True,
    ),
    "lxc.rootfs.path": "lxc.rootfs.path is auto generated from rootfs",
    "lxc.rootfs.options": 'lxc.rootfs.options is not supported, please use mount point options in the "rootfs" key',
}
DEPRECATED = {
    "lxc.aa_profile": "lxc.apparmor.profile",
    "lxc.aa_allow_incomplete": "lxc.apparmor.allow_incomplete",
    "lxc.console": "lxc.console.path",
    "lxc.devttydir": "lxc.tty.dir",
    "lxc.haltsignal": "lxc.signal.halt",
    "lxc.rebootsignal": "lxc.signal.reboot",
    "lxc.stopsignal": "lxc.signal.stop",
    "lxc.id_map": "lxc.idmap",
    "lxc.init_cmd": "lxc.init.cmd",
    "lxc.loglevel": "lxc.log.level",
    "lxc.logfile": "lxc.log.file",
    "lxc.mount": "lxc.mount.fstab",
    **{
        f"lxc.network.{old}": f"lxc.net.INDEX.{new}"
        for old, new in (
            ("type", "type"),
            ("flags", "flags"),
            ("link", "link"),
            ("mtu", "mtu"),
            ("name", "name"),
            ("hwaddr", "hwaddr"),
            ("ipv4", "ipv4.address"),
            ("ipv4.gateway", "ipv4.gateway"),
            ("ipv6", "ipv6.address"),
            ("ipv6.gateway", "ipv6.gateway"),
            ("script.up", "script.up"),
            ("script.down", "script.down"),
        )
    },
    "lxc.pts": "lxc.pty.max",
    "lxc.se_context": "lxc.selinux.context",
    "lxc.seccomp": "lxc.seccomp.profile",
    "lxc.tty": "lxc.tty.max",
    "lxc.utsname": "lxc.uts.name",
}


def validity(key: str, vmid: int = 0) -> bool | str:
    """is_valid_lxc_conf_key: True (taken, maybe with a warning on stderr), PVE's error for a
    key it refuses, or False (unknown: "unable to parse config").

    >>> [validity(k) for k in ("lxc.mount.entry", "lxc.cgroup2.devices.allow", "lxc.net.0.mtu", "lxc.foo")]
    [True, True, True, False]
    >>> validity("lxc.rootfs.path")
    'lxc.rootfs.path is auto generated from rootfs'
    """
    if key.startswith("lxc.limit."):
        print(f"vm {vmid} - {key}: lxc.limit.* was renamed to lxc.prlimit.*", file=sys.stderr)
        return True
    if key in DEPRECATED:
        print(f"vm {vmid} - {key} is deprecated and was renamed to {DEPRECATED[key]}", file=sys.stderr)
        return True
    if key in VALID:
        return VALID[key]
    if key.startswith("lxc.cgroup."):
        print(f"vm {vmid} - {key} is deprecated, this will be a hard error in the future!", file=sys.stderr)
        return True
    return key.startswith(("lxc.cgroup2.", "lxc.prlimit.", "lxc.net."))


# What guestd, root on the lab host, passes through of what PVE takes: what the toolkit and the
# lab's own guests write (device rules, bind mounts, id maps) and what acts only inside the
# guest. The rest runs or reads something on the lab host and is refused, naming the key:
# lxc.hook.* run commands as root there, lxc.include / lxc.mount.fstab / lxc.seccomp.profile read
# its files, lxc.log.file / lxc.console.* write them, lxc.apparmor.* / lxc.selinux.context /
# lxc.cap.* / lxc.mount.auto / lxc.seccomp.* loosen the confinement, lxc.net.* attaches its
# interfaces (netN is the one way onto the bridge), lxc.rootfs.mount / lxc.autodev / lxc.init.*
# replace what guestd sets.
PASSED = frozenset(
    "lxc.mount.entry lxc.idmap lxc.environment lxc.cgroup2.devices.allow lxc.cgroup2.devices.deny"
    " lxc.cgroup.devices.allow lxc.cgroup.devices.deny lxc.uts.name lxc.signal.halt lxc.signal.reboot"
    " lxc.signal.stop lxc.tty.max lxc.pty.max lxc.start.auto lxc.start.delay lxc.start.order lxc.group".split()
)
PASSED_PREFIXES = ("lxc.prlimit.", "lxc.sysctl.")


def refused_by_guestd(key: str) -> str | None:
    """Why guestd refuses a raw key PVE takes, or None when it passes it through.

    >>> [refused_by_guestd(k) for k in ("lxc.mount.entry", "lxc.prlimit.nofile")]
    [None, None]
    >>> refused_by_guestd("lxc.hook.pre-start")
    'lxc.hook.pre-start: the lab passes no hook (it would run as root on the lab host)'
    """
    if key in PASSED or key.startswith(PASSED_PREFIXES):
        return None
    reasons = {
        "lxc.hook.": "the lab passes no hook (it would run as root on the lab host)",
        "lxc.apparmor.": "guestd sets the AppArmor profile itself",
        "lxc.selinux.": "guestd sets the confinement itself",
        "lxc.seccomp.": "guestd sets the confinement itself",
        "lxc.cap.": "guestd sets the capabilities itself",
        "lxc.include": "it would read a file of the lab host",
        "lxc.mount.fstab": "it would read a file of the lab host",
        "lxc.log.": "it would write a file of the lab host",
        "lxc.console.": "it would write a file of the lab host",
        "lxc.net.": "it would attach an interface of the lab host (use netN)",
        "lxc.environment.hooks": "the lab passes no hook",
    }
    reason = next((text for prefix, text in reasons.items() if key.startswith(prefix)), None)
    return f"{key}: {reason or 'not among the raw keys the lab passes (lab/lxc_keys.py PASSED)'}"
