"""`up`, `down` and `status` of the whole lab.

``up`` converges: whatever a previous (possibly killed) run left, it ends with the bridge,
the index server, lxcfs and every container running and booted; a second ``up`` changes
nothing. ``down`` removes every process, mount, link and container the lab started;
the caches, the SSH key and the storage dirs stay.
"""

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator

from lab import (
    container,
    credentials,
    gpus,
    guestd,
    guests,
    index,
    layout,
    lxcfs,
    network,
    node,
    rootfs,
    sshkeys,
    storage,
)
from lab.mounts import unmount_under
from lab.shell import LabError

RUNTIME_DIRS = (
    layout.RUN_DIR,
    layout.LXC_PATH,
    layout.DEV_DIR,
    layout.INDEX_DIR,
    layout.LXCFS_DIR,
    layout.NODE_DIR,
    layout.VOLUMES_DIR,
)
FAULTS_FILE = f"{node.SIM_CONFIG_DIR}/faults.yaml"


def require_host() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (LXC containers, bridge, device nodes)")
    missing = [tool for tool in ("lxc-start", "debootstrap", "ssh-keygen", "ip") if not shutil.which(tool)]
    if missing:
        raise LabError(f"missing {', '.join(missing)}: apt-get install lxc lxcfs debootstrap openssh-client iproute2")


@contextlib.contextmanager
def _exclusive() -> Iterator[None]:
    """One up/down at a time per state dir (two test sessions, two terminals)."""
    layout.LAB_DIR.mkdir(parents=True, exist_ok=True)
    with open(layout.LAB_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up() -> None:
    """Bring the lab up, or repair it."""
    require_host()
    with _exclusive():
        _up()


def _up() -> None:
    started = time.monotonic()
    for directory in (layout.CACHE_DIR, layout.RUN_DIR, layout.LOG_DIR, layout.LXC_PATH):
        directory.mkdir(parents=True, exist_ok=True)
    lower, rootfs_changed = rootfs.ensure_rootfs(sshkeys.ensure_client_key())
    sshkeys.write_known_hosts(lower)
    network.bridge_up()
    network.firewall_up()
    # fake GPU nodes bound into the containers lab up boots beside pve1 (none by default); pve1's
    # own are made by its nvidia-modprobe when the node preparation runs, as on a real node
    devices = gpus.lab_devices() if set(layout.HOSTS) - {layout.NODE} else []
    gpus.create_device_nodes(devices)
    storage.populate()
    with_lxcfs = lxcfs.start()
    node.prepare_proc_files(gpus.node_proc_devices())
    fingerprint = node.prepare_etc_pve()
    credentials.ensure_api_key()
    schema = node.schema_dir()
    if not schema:
        node.warn_missing_schema()
    _remove_stale_guests()
    guestd_pid = guestd.start()
    print(f"lab: guestd {layout.GUESTD_SOCKET} (pid {guestd_pid})", flush=True)
    # containers boot while the index is built
    for name, ip in layout.HOSTS.items():
        extra, files, bound = [], None, devices
        if name == layout.NODE:
            extra, files, bound = node.config_lines(schema), node.files(with_emulator=bool(schema)), []
        if container.ensure_running(name, ip, lower, bound, with_lxcfs, rootfs_changed, extra, files):
            print(f"lab: {name} started at {ip}", flush=True)
    version = index.publish(layout.SIM_DIR, lower)
    index_pid = index.serve()
    print(f"lab: index {layout.INDEX_URL} (pid {index_pid}) serves sglang=={version}", flush=True)
    nvidia_smi = (layout.SIM_DIR / "nvidia_smi.py").read_bytes()
    driver = f"{layout.GUEST_DRIVER_VERSION}\n".encode()
    for name, ip in layout.HOSTS.items():
        if name != layout.NODE:
            container.install_file(name, "/usr/bin/nvidia-smi", nvidia_smi, 0o755)
            container.install_file(name, FAULTS_FILE, b"", 0o644, overwrite=False)
            container.install_file(name, f"{node.SIM_CONFIG_DIR}/driver-version", driver, 0o644)
        system = container.wait_until_booted(name, ip)
        print(f"lab: {name} is up (systemd {system}, ssh root@{ip})", flush=True)
    if schema:
        node.wait_for_api()
        print(
            f"lab: API https://{layout.NODE_ADDRESS}:{layout.API_PORT}/api2/json "
            f"(CA {layout.PVE_CA}, fingerprint {fingerprint}, credentials {layout.PVE_CREDENTIALS})",
            flush=True,
        )
    print(f"lab: up in {time.monotonic() - started:.1f} s", flush=True)


def _remove_stale_guests() -> None:
    """Guests whose config is gone from /etc/pve (a lab killed half-way) are removed."""
    for vmid in guests.known():
        if not (node.ETC_PVE / "lxc" / f"{vmid}.conf").exists():
            print(f"lab: removing stale guest {vmid}", flush=True)
            guests.destroy(vmid)


def down() -> None:
    require_host()
    with _exclusive():
        _down()


def _down() -> None:
    started = time.monotonic()
    guests.destroy_all()
    layout.KNOWN_HOSTS.unlink(missing_ok=True)  # with the guests' pins; `up` writes it anew
    guestd.stop()
    for name in layout.HOSTS:
        container.destroy(name)
    index.stop()
    lxcfs.stop()
    network.firewall_down()
    network.bridge_down()
    for directory in RUNTIME_DIRS:
        unmount_under(directory)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"lab: down in {time.monotonic() - started:.1f} s", flush=True)


def status() -> list[str]:
    """One line per part of the lab."""
    lines = [
        f"{name}: {container.state(name)} ip={ip} init_pid={container.init_pid(name) or '-'}"
        for name, ip in layout.HOSTS.items()
    ]
    lines += [
        f"guest {vmid} ({hostname}): {container.state(guests.name(vmid))} "
        f"init_pid={container.init_pid(guests.name(vmid)) or '-'}"
        for vmid, hostname in sorted(guests.known().items())
    ]
    lines.append(f"guestd {layout.GUESTD_SOCKET}: pid {guestd.pid() or '- (not running)'}")
    bridge = "up" if network.link_exists(layout.BRIDGE) else "absent"
    lines.append(f"bridge {layout.BRIDGE}: {bridge} {layout.BRIDGE_ADDRESS}/{layout.PREFIX_LENGTH}")
    lines.append(f"index {layout.INDEX_URL}: pid {index.server_pid() or '- (not running)'}")
    lines.append(f"lxcfs {layout.LXCFS_DIR}: pid {lxcfs.pid() or '- (not running)'}")
    lines.append(f"state dir: {layout.LAB_DIR}")
    return lines
