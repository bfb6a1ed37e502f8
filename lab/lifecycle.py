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
from pathlib import Path

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
    *(each.dir for each in layout.NODES.values()),  # pve1's: NODE_DIR
    *(each.volumes_dir for each in layout.NODES.values()),
)
FAULTS_FILE = f"{node.SIM_CONFIG_DIR}/faults.yaml"


def require_host() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (LXC containers, bridge, device nodes)")
    missing = [tool for tool in ("lxc-start", "debootstrap", "ssh-keygen", "ip") if not shutil.which(tool)]
    if missing:
        raise LabError(f"missing {', '.join(missing)}: apt-get install lxc lxcfs debootstrap openssh-client iproute2")


INOTIFY_INSTANCES = "/proc/sys/fs/inotify/max_user_instances"
INOTIFY_WANTED = 1024  # systemd in each container holds several; every lab of every slot is uid 0's


def raise_inotify_limit() -> None:
    """systemd as a container's PID 1 exits at once ("Failed to allocate manager object: Too many
    open files") when uid 0 of the lab host holds fs.inotify.max_user_instances inotify instances
    (default 128: about a dozen containers across the slots, fewer than the scale lab and three test
    workers hold): raised to INOTIFY_WANTED, never lowered, and said so."""
    try:
        limit = int(Path(INOTIFY_INSTANCES).read_text())
    except (OSError, ValueError):
        return
    if limit < INOTIFY_WANTED:
        Path(INOTIFY_INSTANCES).write_text(f"{INOTIFY_WANTED}\n")
        print(f"lab: fs.inotify.max_user_instances raised from {limit} to {INOTIFY_WANTED}", flush=True)


@contextlib.contextmanager
def _exclusive() -> Iterator[None]:
    """One up/down at a time per state dir (two test sessions, two terminals)."""
    layout.LAB_DIR.mkdir(parents=True, exist_ok=True)
    with open(layout.LAB_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up(scale: bool = False) -> None:
    """Bring the lab up, or repair it; ``scale``: with the scale lab's nodes too (layout.SCALE_NODES,
    for inventory/lab_scale.py). Without it a running pve2 is left as it is."""
    require_host()
    with _exclusive():
        _up([layout.NODES[layout.NODE], *(layout.NODES[name] for name in layout.SCALE_NODES if scale)])


def _up(nodes: list[layout.LabNode]) -> None:
    started = time.monotonic()
    raise_inotify_limit()
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
    fingerprints = {each.name: node.prepare_etc_pve(each) for each in nodes}
    credentials.ensure_api_key()
    schema = node.schema_dir()
    if not schema:
        node.warn_missing_schema()
    _remove_stale_guests()
    for each in nodes:
        guestd_pid = guestd.start(each)
        print(f"lab: {each.name}'s guestd {each.guestd_socket} (pid {guestd_pid})", flush=True)
    # containers boot while the index is built
    booting = {**layout.HOSTS, **{each.name: each.address for each in nodes}}
    for name, ip in booting.items():
        extra, files, bound = [], None, devices
        if name in layout.NODES:
            each = layout.NODES[name]
            extra, files, bound = node.config_lines(schema, each), node.files(bool(schema), each), []
        if container.ensure_running(name, ip, lower, bound, with_lxcfs, rootfs_changed, extra, files):
            print(f"lab: {name} started at {ip}", flush=True)
    version = index.publish(layout.SIM_DIR, lower)
    index_pid = index.serve()
    print(f"lab: index {layout.INDEX_URL} (pid {index_pid}) serves sglang=={version}", flush=True)
    for vmid in guests.known():
        guests.refresh_apt_source(vmid)
    nvidia_smi = (layout.SIM_DIR / "nvidia_smi.py").read_bytes()
    driver = f"{layout.GUEST_DRIVER_VERSION}\n".encode()
    for name, ip in booting.items():
        if name not in layout.NODES:
            container.install_file(name, "/usr/bin/nvidia-smi", nvidia_smi, 0o755)
            container.install_file(name, FAULTS_FILE, b"", 0o644, overwrite=False)
            container.install_file(name, f"{node.SIM_CONFIG_DIR}/driver-version", driver, 0o644)
        system = container.wait_until_booted(name, ip)
        print(f"lab: {name} is up (systemd {system}, ssh root@{ip})", flush=True)
    for each in nodes if schema else []:
        node.wait_for_api(each)
        print(
            f"lab: {each.name}'s API https://{each.address}:{layout.API_PORT}/api2/json "
            f"(CA {layout.PVE_CA}, fingerprint {fingerprints[each.name]}, credentials {layout.PVE_CREDENTIALS})",
            flush=True,
        )
    print(f"lab: up in {time.monotonic() - started:.1f} s", flush=True)


def _remove_stale_guests() -> None:
    """Guests whose config is gone from their node's /etc/pve (a lab killed half-way) are removed."""
    for vmid in guests.known():
        owner = layout.NODES[guests.node_of(vmid)]
        if not (owner.etc_pve / "nodes" / owner.name / "lxc" / f"{vmid}.conf").exists():
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
    for each in layout.NODES.values():
        guestd.stop(each)
    for name in {**layout.HOSTS, **layout.NODES}:
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
    scale = {name: layout.NODES[name].address for name in layout.SCALE_NODES if container.state(name) != "ABSENT"}
    lines = [
        f"{name}: {container.state(name)} ip={ip} init_pid={container.init_pid(name) or '-'}"
        for name, ip in {**layout.HOSTS, **scale}.items()
    ]
    lines += [
        f"guest {vmid} ({hostname}) on {guests.node_of(vmid)}: {container.state(guests.name(vmid))} "
        f"init_pid={container.init_pid(guests.name(vmid)) or '-'}"
        for vmid, hostname in sorted(guests.known().items())
    ]
    for name in [layout.NODE, *scale]:
        each = layout.NODES[name]
        lines.append(f"{name}'s guestd {each.guestd_socket}: pid {guestd.pid(each) or '- (not running)'}")
    bridge = "up" if network.link_exists(layout.BRIDGE) else "absent"
    lines.append(f"bridge {layout.BRIDGE}: {bridge} {layout.BRIDGE_ADDRESS}/{layout.PREFIX_LENGTH}")
    lines.append(f"index {layout.INDEX_URL}: pid {index.server_pid() or '- (not running)'}")
    lines.append(f"lxcfs {layout.LXCFS_DIR}: pid {lxcfs.pid() or '- (not running)'}")
    lines.append(f"state dir: {layout.LAB_DIR}")
    return lines
