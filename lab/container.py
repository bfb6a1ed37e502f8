"""LXC system containers: systemd as PID 1, sshd, a fixed address on the lab bridge.

Each container lives in the lab's own lxcpath (LXC_PATH/<name>/): its config and a fresh
overlay upper dir over the cached rootfs, recreated whenever the container is started.
"""

import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from lab import apt_repo, layout, lxcfs, network, rootfs
from lab.gpus import DeviceNode
from lab.shell import LabError, run

BOOT_TIMEOUT = 60.0


def container_dir(name: str) -> Path:
    return layout.LXC_PATH / name


def apparmor_lines() -> list[str]:
    """The AppArmor profile pve-container gives a container without nesting (src/PVE/LXC.pm
    make_apparmor_config, 94f5585): LXC's generated profile, mqueue allowed, no mount over /proc
    or /sys (features: fuse adds `mount fstype=fuse`, as pve1's lines do: lab/node.py). On a lab
    host whose kernel has no AppArmor, LXC runs with no LSM and these lines change nothing
    (lxc src/lxc/lsm/apparmor.c lsm_apparmor_ops_init returns NULL); nothing is `unconfined`."""
    return [
        "lxc.apparmor.profile = generated",
        "lxc.apparmor.raw = allow mqueue,",
        "lxc.apparmor.raw = deny mount -> /proc/,",
        "lxc.apparmor.raw = deny mount -> /sys/,",
    ]


def base_lines(name: str, hostname: str, rootfs_path: str) -> list[str]:
    """What every lab container's LXC config starts with."""
    cgroups = layout.cgroup_dirs(name)
    return [
        "lxc.include = /usr/share/lxc/config/common.conf",
        "lxc.arch = linux64",
        f"lxc.uts.name = {hostname}",
        f"lxc.rootfs.path = {rootfs_path}",
        *apparmor_lines(),
        "lxc.tty.max = 2",
        "lxc.pty.max = 16",
        f"lxc.cgroup.dir.monitor = {cgroups['monitor']}",
        f"lxc.cgroup.dir.container = {cgroups['container']}",
        "lxc.cgroup.dir.container.inner = ns",
    ]


def net_lines(
    index: int,
    veth: str,
    hwaddr: str,
    address: str | None,
    gateway: str | None = None,
    name: str = "eth0",
) -> list[str]:
    """A veth on the lab bridge with a fixed MAC (a random one per boot leaves a stale ARP
    entry); no gateway means no default route: the container reaches only the bridge."""
    prefix = f"lxc.net.{index}"
    lines = [
        f"{prefix}.type = veth",
        f"{prefix}.link = {layout.BRIDGE}",
        f"{prefix}.veth.pair = {veth}",
        f"{prefix}.name = {name}",
        f"{prefix}.flags = up",
        f"{prefix}.hwaddr = {hwaddr}",
    ]
    lines += [f"{prefix}.ipv4.address = {address}"] if address else []
    lines += [f"{prefix}.ipv4.gateway = {gateway}"] if gateway else []
    return lines


def device_lines(devices: list[DeviceNode]) -> list[str]:
    """Fake device nodes of a container `lab up` boots directly beside pve1 (pve1 gets none: its
    nvidia-modprobe makes its own): each allowed by the device cgroup and bound at its /dev path, in LXC's keys (lxc/lxc
    doc/lxc.container.conf.sgml.in: lxc.cgroup2.[controller name].[controller file],
    lxc.mount.entry)."""
    lines = [f"lxc.cgroup2.devices.allow = c {device.major}:{device.minor} rwm" for device in devices]
    mount = "none bind,optional,create=file 0 0"
    return lines + [f"lxc.mount.entry = {device.source} {device.path.lstrip('/')} {mount}" for device in devices]


def cgroup_v1_twins(lines: list[str]) -> list[str]:
    """The cgroup v1 twins of lxc.cgroup2.devices.allow/deny lines (lab only; see the comment
    they carry)."""
    twins = [line.replace("lxc.cgroup2.devices.", "lxc.cgroup.devices.", 1) for line in lines]
    twins = [line for line in twins if line.startswith(("lxc.cgroup.devices.allow ", "lxc.cgroup.devices.deny "))]
    if not twins:
        return []
    return [
        "# lab only: this host is cgroup v1 hybrid, where LXC ignores the cgroup2 rules above",
        "# ('Ignoring cgroup2 limits on legacy cgroup system'); Proxmox 7+ is cgroup2 only.",
        *twins,
    ]


def render_config(
    name: str,
    ip: str,
    lower: Path,
    devices: list[DeviceNode],
    with_lxcfs: bool,
    extra: list[str] = (),
) -> str:
    """The LXC config of one lab container (``extra``: lines the node adds)."""
    lines = ["# Written by `python -m lab up`; recreated on every fresh start."]
    lines += base_lines(name, name, f"overlay:{lower}:{container_dir(name) / 'upper'}")
    lines += net_lines(0, layout.veth_name(name), layout.mac_address(ip), f"{ip}/{layout.PREFIX_LENGTH}")
    if with_lxcfs:
        lines += ["# the container's own /proc/uptime etc. (pyinfra's server.reboot reads uptime)"]
        lines += lxcfs.mount_entries()
    lines += ["# model storage, bind-mounted like the Proxmox host's /shared and /data"]
    lines += [
        f"lxc.mount.entry = {host_dir} {mount.lstrip('/')} none bind,create=dir 0 0"
        for mount, host_dir in layout.STORAGE_MOUNTS.items()
    ]
    lines += ["# the node's fake GPUs (lab/gpus.py)"]
    lines += device_lines(devices)
    lines += cgroup_v1_twins(device_lines(devices))
    lines += ["# the NVIDIA kernel module's /proc/driver/nvidia (the node's driver version)"]
    lines += [driver_proc_entry()]
    return "\n".join([*lines, *extra]) + "\n"


def driver_proc_entry() -> str:
    return f"lxc.mount.entry = {layout.NODE_DIR / 'proc-driver'} proc/driver none bind,ro 0 0"


def lxc(command: str, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run([command, "-P", str(layout.LXC_PATH), "-n", name, *args], check=check)


def state(name: str) -> str:
    """'RUNNING', 'STOPPED', ... or 'ABSENT' when the lab has no such container."""
    if not (container_dir(name) / "config").exists():
        return "ABSENT"
    return lxc("lxc-info", name, "--state", "--no-humanize").stdout.strip()


def init_pid(name: str) -> int | None:
    """Host pid of the container's systemd, or None when it is not running."""
    if state(name) != "RUNNING":
        return None
    return int(lxc("lxc-info", name, "--pid", "--no-humanize").stdout.strip())


def attach_argv(name: str, command: list[str]) -> list[str]:
    """lxc-attach running ``command`` as is (no shell) as root, with a clean environment
    (lxc-attach sets PATH and container=lxc; HOME is root's, as docker exec sets it)."""
    options = ["--clear-env", "--set-var", "HOME=/root"]
    return ["lxc-attach", "-P", str(layout.LXC_PATH), "-n", name, *options, "--", *command]


def destroy(name: str) -> None:
    """Kill the container (its PID namespace takes every process with it) and delete its
    dir; the rootfs, the lower layer, stays untouched (no lxc-destroy)."""
    if state(name) not in ("ABSENT", "STOPPED"):
        lxc("lxc-stop", name, "--kill", check=False)
        lxc("lxc-wait", name, "--state", "STOPPED", "--timeout", "10")
    for veth in veth_pairs(name):  # left by a run killed mid-start
        network.delete_link(veth)
    remove_empty_cgroups(name)
    shutil.rmtree(container_dir(name), ignore_errors=True)


def veth_pairs(name: str) -> list[str]:
    """Host-side veth names the container's config asks for."""
    config = container_dir(name) / "config"
    if not config.exists():
        return [layout.veth_name(name)]
    return re.findall(r"^lxc\.net\.\d+\.veth\.pair = (\S+)$", config.read_text(), re.M)


def remove_empty_cgroups(name: str) -> None:
    """Remove the container's cgroups a killed LXC monitor could not clean up, and the slot's
    parent cgroups once empty. A cgroup that still holds a process refuses rmdir and is kept."""
    for relative in layout.cgroup_dirs(name).values():
        for top in Path("/sys/fs/cgroup").glob(f"*/{relative}"):
            nested = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for cgroup in [*nested, top]:
                with contextlib.suppress(OSError):
                    cgroup.rmdir()
        for parent in Path("/sys/fs/cgroup").glob(f"*/{Path(relative).parent}"):
            with contextlib.suppress(OSError):
                parent.rmdir()


def start(name: str, config: str) -> None:
    """Write the config and lxc-start the container (daemonized, logged to LOG_DIR)."""
    (container_dir(name) / "config").write_text(config)
    log = layout.LOG_DIR / f"{name}.lxc.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    lxc("lxc-start", name, "--logfile", str(log), "--logpriority", "INFO")


def ensure_running(
    name: str,
    ip: str,
    lower: Path,
    devices: list[DeviceNode],
    with_lxcfs: bool,
    restart: bool,
    extra: list[str] = (),
    files: dict[str, tuple[bytes | str, int]] | None = None,
) -> bool:
    """Start the container on a fresh upper dir unless it already runs this config and no
    ``restart`` is asked for; True when it was (re)started. ``files`` (path -> content, mode)
    are written into the fresh upper dir; their digest is part of the config, so a change
    restarts the container."""
    files = {
        # what Proxmox writes into every container it starts: its name and /etc/hosts
        "/etc/hostname": (f"{name}\n".encode(), 0o644),
        "/etc/hosts": (rootfs.hosts_file(name).encode(), 0o644),
        "/etc/pip.conf": (rootfs.PIP_CONF.encode(), 0o644),
        "/etc/apt/sources.list": (apt_repo.APT_SOURCES.encode(), 0o644),
        **(files or {}),
    }
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    config = render_config(name, ip, lower, devices, with_lxcfs, [*extra, f"# files {digest}"])
    config_file = container_dir(name) / "config"
    if not restart and state(name) == "RUNNING" and config_file.read_text() == config:
        return False
    destroy(name)
    write_tree(container_dir(name) / "upper", files)
    start(name, config)
    return True


def write_tree(root: Path, files: dict[str, tuple[bytes | str, int]], owner: int = 0) -> None:
    """Write ``files`` (absolute path in the container -> content, mode; a str content is a
    symlink's target) under ``root``, owned by ``owner`` (the container's root, shifted for
    unprivileged ones)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chown(root, owner, owner)
    for path, (content, mode) in files.items():
        target = root / path.lstrip("/")
        parents = [target.parent, *target.parent.parents]
        for directory in reversed([d for d in parents if root in d.parents and not d.exists()]):
            directory.mkdir()
            os.chown(directory, owner, owner)
        if isinstance(content, str):
            target.symlink_to(content)
            os.lchown(target, owner, owner)
            continue
        target.write_bytes(content)
        target.chmod(mode)
        os.chown(target, owner, owner)


def _attach_output(name: str, *command: str) -> str:
    result = subprocess.run(attach_argv(name, list(command)), capture_output=True, text=True)
    return result.stdout.strip()


def wait_until_booted(name: str, ip: str, timeout: float = BOOT_TIMEOUT) -> str:
    """Wait for systemd to finish booting, ssh.service to be active and port 22 to answer
    from the host; returns systemd's state ('running' or 'degraded')."""
    deadline = time.monotonic() + timeout
    system = ssh = "unknown"
    while time.monotonic() < deadline:
        system = _attach_output(name, "systemctl", "is-system-running")
        ssh = _attach_output(name, "systemctl", "is-active", "ssh")
        if system in ("running", "degraded") and ssh == "active":
            try:
                socket.create_connection((ip, 22), timeout=1).close()
                return system
            except OSError:
                pass
        time.sleep(0.1)
    raise LabError(
        f"{name} did not boot in {timeout:.0f} s (system: {system}, ssh: {ssh}); "
        f"see {layout.LOG_DIR / f'{name}.lxc.log'} and `python -m lab exec {name} -- journalctl -b`"
    )


def install_file(name: str, path: str, content: bytes, mode: int, overwrite: bool = True) -> None:
    """Write a file into the running container's filesystem (through its init's root)."""
    pid = init_pid(name)
    if pid is None:
        raise LabError(f"{name} is not running; run `python -m lab up`")
    target = Path(f"/proc/{pid}/root") / path.lstrip("/")
    if target.exists() and (not overwrite or target.read_bytes() == content):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    target.chmod(mode)
