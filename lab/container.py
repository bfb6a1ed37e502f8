"""LXC system containers: systemd as PID 1, sshd, a fixed address on the lab bridge.

Each container lives in the lab's own lxcpath (LXC_PATH/<name>/): its config and a fresh
overlay upper dir over the cached rootfs, recreated whenever the container is started.
"""

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

from lab import layout, lxcfs, network, rootfs
from lab.shell import LabError, run
from sglang_pve.passthrough import DeviceNode, allow_rules, lxc_config_lines

BOOT_TIMEOUT = 60.0


def container_dir(name: str) -> Path:
    return layout.LXC_PATH / name


def render_config(
    name: str, ip: str, lower: Path, devices: list[DeviceNode], with_lxcfs: bool
) -> str:
    """The LXC config of one lab container."""
    lines = [
        "# Written by `python -m lab up`; recreated on every fresh start.",
        "lxc.include = /usr/share/lxc/config/common.conf",
        "lxc.arch = linux64",
        f"lxc.uts.name = {name}",
        f"lxc.rootfs.path = overlay:{lower}:{container_dir(name) / 'upper'}",
        "lxc.apparmor.profile = unconfined",
        "lxc.net.0.type = veth",
        f"lxc.net.0.link = {layout.BRIDGE}",
        f"lxc.net.0.veth.pair = {layout.veth_name(name)}",
        "lxc.net.0.name = eth0",
        "lxc.net.0.flags = up",
        f"lxc.net.0.hwaddr = {layout.mac_address(ip)}",
        # no lxc.net.0.ipv4.gateway: no default route, the container reaches only the bridge
        f"lxc.net.0.ipv4.address = {ip}/{layout.PREFIX_LENGTH}",
        "lxc.tty.max = 1",
        "lxc.pty.max = 16",
    ]
    if with_lxcfs:
        lines += ["# the container's own /proc/uptime etc. (pyinfra's server.reboot reads uptime)"]
        lines += lxcfs.mount_entries()
    lines += ["# model storage, bind-mounted like the Proxmox host's /shared and /data"]
    lines += [
        f"lxc.mount.entry = {host_dir} {mount.lstrip('/')} none bind,create=dir 0 0"
        for mount, host_dir in layout.STORAGE_MOUNTS.items()
    ]
    lines += ["# fake GPUs, passed through with the production lines (sglang_pve.passthrough)"]
    lines += lxc_config_lines(devices)
    lines += [
        "# lab only: this host is cgroup v1 hybrid, where LXC ignores the cgroup2 rules above",
        "# ('Ignoring cgroup2 limits on legacy cgroup system'); Proxmox 7+ is cgroup2 only.",
    ]
    lines += [f"lxc.cgroup.devices.allow = {rule}" for rule in allow_rules(devices)]
    return "\n".join(lines) + "\n"


def _lxc(command: str, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run([command, "-P", str(layout.LXC_PATH), "-n", name, *args], check=check)


def state(name: str) -> str:
    """'RUNNING', 'STOPPED', ... or 'ABSENT' when the lab has no such container."""
    if not (container_dir(name) / "config").exists():
        return "ABSENT"
    return _lxc("lxc-info", name, "--state", "--no-humanize").stdout.strip()


def init_pid(name: str) -> int | None:
    """Host pid of the container's systemd, or None when it is not running."""
    if state(name) != "RUNNING":
        return None
    return int(_lxc("lxc-info", name, "--pid", "--no-humanize").stdout.strip())


def attach_argv(name: str, command: list[str]) -> list[str]:
    """lxc-attach running ``command`` as is (no shell) as root, with a clean environment
    (lxc-attach sets PATH and container=lxc; HOME is root's, as docker exec sets it)."""
    options = ["--clear-env", "--set-var", "HOME=/root"]
    return ["lxc-attach", "-P", str(layout.LXC_PATH), "-n", name, *options, "--", *command]


def destroy(name: str) -> None:
    """Kill the container (its PID namespace takes every process with it) and delete its
    dir; the rootfs, the lower layer, stays untouched (no lxc-destroy)."""
    if state(name) not in ("ABSENT", "STOPPED"):
        _lxc("lxc-stop", name, "--kill", check=False)
        _lxc("lxc-wait", name, "--state", "STOPPED", "--timeout", "10")
    network.delete_link(layout.veth_name(name))  # left by a run killed mid-start
    _remove_empty_cgroups(name)
    shutil.rmtree(container_dir(name), ignore_errors=True)


def _remove_empty_cgroups(name: str) -> None:
    """Remove the container's cgroups a killed LXC monitor could not clean up (LXC would
    otherwise move on to lxc.payload.<name>-1, -2, ...). A cgroup that still holds a
    process refuses rmdir and is kept."""
    tops = [
        top
        for kind in ("payload", "monitor")
        for pattern in (f"lxc.{kind}.{name}", f"lxc.{kind}.{name}-*")
        for top in Path("/sys/fs/cgroup").glob(f"*/{pattern}")
    ]
    for top in tops:
        nested = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for cgroup in [*nested, top]:
            with contextlib.suppress(OSError):
                cgroup.rmdir()


def ensure_running(
    name: str, ip: str, lower: Path, devices: list[DeviceNode], with_lxcfs: bool, restart: bool
) -> bool:
    """Start the container on a fresh upper dir unless it already runs this config and no
    ``restart`` is asked for; True when it was (re)started."""
    config = render_config(name, ip, lower, devices, with_lxcfs)
    config_file = container_dir(name) / "config"
    if not restart and state(name) == "RUNNING" and config_file.read_text() == config:
        return False
    destroy(name)
    upper = container_dir(name) / "upper"
    # what Proxmox writes into every container it starts: its name and /etc/hosts
    (upper / "etc").mkdir(parents=True)
    (upper / "etc/hostname").write_text(f"{name}\n")
    (upper / "etc/hosts").write_text(rootfs.hosts_file(name))
    (upper / "etc/pip.conf").write_text(rootfs.PIP_CONF)
    config_file.write_text(config)
    log = layout.LOG_DIR / f"{name}.lxc.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    _lxc("lxc-start", name, "--logfile", str(log), "--logpriority", "INFO")
    return True


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
