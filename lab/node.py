"""The Proxmox node `pve1`: a lab system container that plays a PVE host.

What makes it a node, beyond what every lab container has (systemd, sshd, the fake GPUs):

- /etc/pve, a FUSE filesystem with pmxcfs's rules (lab/pmxcfs.py as pve-cluster.service, on
  /dev/fuse) over NODE_DIR/etc-pve, bound at /var/lib/pve-cluster/etc-pve (it outlives a restart
  of pve1, as pmxcfs's config.db does): nodes/pve1/lxc/<vmid>.conf in the real format (written by
  the emulator), the links lxc, local, qemu-server, openvz, local/pve-ssl.pem and .key,
  pve-root-ca.pem, priv/ (the CA key, the API credentials);
- /proc/devices as a node with the NVIDIA driver shows it (nvidia-uvm's major is dynamic, and
  the fake nodes carry the same one) and /proc/driver/nvidia/version, both bound read-only;
- the API emulator (lab/pve as a zipapp, /usr/share/pve-lab/pve-emulator.pyz) as pveproxy.service
  on 8006, with the reference schema bound read-only at /usr/share/pve-lab/reference, its request
  log in /var/log/pve-emulator (PVE_REQUEST_LOG on the host) and its fault rules in
  /etc/pve/emulator-faults.json (PVE_FAULTS);
- /usr/sbin/pct, talking to the local API and, for exec/enter, to guestd on the lab host through
  the socket bound at /run/pve-lab (guestd creates the guests as sibling containers);
- /usr/sbin/zfs, the snapshots of the emulator's zfspool datasets (lab/pve/zfs.py): what Proxmox
  took and what sanoid or an operator would take beside it (their state bound from the host, so it
  outlives a restart of pve1 as a pool outlives a reboot);
- no NVIDIA device node from the lab: the device cgroup allows every NVIDIA major (mknod
  included) and /dev/char is a tmpfs, so the node's nvidia-modprobe (lab/sglang_sim, written from
  NVIDIA's source) makes them when the node preparation's unit runs, as on a real node; the
  guests get theirs from devN through the pve-container stand-in (lab/devn.py), which stats
  pve1's nodes;
- the driver's user space: nvidia-smi reporting the node's driver version, nvidia-modprobe and
  nvidia-persistenced.service (installed, not enabled).
"""

import http.client
import json
import os
import ssl
import time
from pathlib import Path

from lab import certs, container, credentials, gpus, layout
from lab.files import write_file
from lab.pve import pmxcfs, zfs
from lab.sglang_sim.nvidia_smi import PCI_BUS_IDS
from lab.shell import LabError

PVE1 = layout.NODES[layout.NODE]
ETC_PVE = PVE1.etc_pve
PROC_DEVICES = layout.NODE_DIR / "proc-devices"
PROC_DRIVER = layout.NODE_DIR / "proc-driver"
# the zfspool datasets' snapshots (lab/pve/zfs.py): on the host, so they outlive a restart of pve1
# (its root is a fresh overlay upper dir each start) as a pool outlives a reboot, like the guests' volumes
ZFS_STATE = PVE1.zfs_state
NODE_ZFS_STATE = str(Path(zfs.DEFAULT_STATE).parent)
NODE_SHARE_DIR = "/usr/share/pve-lab"
NODE_EMULATOR = f"{NODE_SHARE_DIR}/pve-emulator.pyz"
NODE_SCHEMA_DIR = f"{NODE_SHARE_DIR}/reference"
NODE_LOG_DIR = "/var/log/pve-emulator"
NODE_CREDENTIALS = "/etc/pve/priv/lab-credentials.json"
NODE_CFS_BACKING = "/var/lib/pve-cluster/etc-pve"  # what pmxcfs serves as /etc/pve
SIM_CONFIG_DIR = "/etc/sglang-sim"
# The driver's daemon: what the node's unit runs (the real one keeps the GPUs initialised). The unit
# is NVIDIA/nvidia-persistenced init/systemd/nvidia-persistenced.service.template (c0e1e2b, what its
# init/install.sh installs, default user nvidia-persistenced) less Type=forking, --user __USER__ and
# ExecStopPost: this stand-in does not fork and drops no privileges. A driver from NVIDIA's .run
# installer has no unit at all; the node preparation then warns and skips it (tests/unit/test_node_prep.py).
PERSISTENCED = b"""#!/bin/sh
# sglang-pve lab: stands in for NVIDIA's persistence daemon (no GPUs to keep initialised)
exec sleep infinity
"""
PERSISTENCED_UNIT = b"""[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
ExecStart=/usr/bin/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""
TEMPLATE_STAND_IN = b"sglang-pve lab: guestd creates containers from the lab's cached Debian 12 rootfs\n"
# zfs: the emulator's zfspool datasets (lab/pve/zfs.py), where sanoid or an operator would snapshot them
ZFS_COMMAND = f"""#!/usr/bin/python3
import sys

sys.path.insert(0, "{NODE_EMULATOR}")
from pve.zfs import main

sys.exit(main())
""".encode()

# pve-cluster's own unit is Type=forking (pmxcfs daemonizes); this one tells systemd when mounted.
CLUSTER_UNIT = f"""\
[Unit]
Description=The Proxmox VE cluster filesystem (sglang-pve lab, lab/pmxcfs.py)
Before=pveproxy.service ssh.service

[Service]
Type=notify
ExecStart=/usr/bin/pmxcfs {NODE_CFS_BACKING} /etc/pve
KillMode=process
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

EMULATOR_UNIT = """\
[Unit]
Description=PVE API Proxy Server (sglang-pve lab emulator, lab/pve)
Wants=pve-cluster.service
After=network.target pve-cluster.service

[Service]
ExecStart=/usr/bin/python3 {emulator} serve --version {version} \\
    --node {node} --port {port} --state-root /etc/pve \\
    --schema-dir {schema_dir} --credentials {credentials} \\
    --cert /etc/pve/local/pve-ssl.pem --key /etc/pve/local/pve-ssl.key \\
    --request-log {log_dir}/{request_log} \\
    --faults /etc/pve/{faults} \\
    --backend guestd --backend-options '{{"socket": "{guestd_dir}/guestd.sock"}}'
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


def schema_dir() -> Path | None:
    """The reference API schemas, resolved like the emulator resolves them; None if missing."""
    configured = os.environ.get("SGLANG_PVE_PVE_SCHEMA_DIR")
    path = Path(configured) if configured else layout.SOURCE_DIR.parent.parent / "shared/reference"
    return path.resolve() if path.is_dir() else None


def driver_version_file(version: str) -> str:
    """/proc/driver/nvidia/version of the node's kernel module (the open module's format)."""
    return (
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
        "(dvs-builder@U22-I3-AM02-24-3)  Wed Sep 24 21:35:06 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n"
    )


def prepare_proc_files(proc_devices: str) -> None:
    """The generated /proc entries every lab container binds (the kernel is the node's): devices,
    the driver's version and its GPUs (gpus/<bus>/information, one per GPU the module probed)."""
    layout.NODE_DIR.mkdir(parents=True, exist_ok=True)
    PROC_DEVICES.write_text(proc_devices)
    (PROC_DRIVER / "nvidia").mkdir(parents=True, exist_ok=True)
    (PROC_DRIVER / "nvidia/version").write_text(driver_version_file(layout.DRIVER_VERSION))
    for index, bus in enumerate(PCI_BUS_IDS[: layout.GPU_COUNT]):
        name = bus[4:].lower()  # nv_procfs_add_gpu: "%04x:%02x:%02x.%1x"; nvidia-smi prints 8 domain digits
        (PROC_DRIVER / "nvidia/gpus" / name).mkdir(parents=True, exist_ok=True)
        (PROC_DRIVER / "nvidia/gpus" / name / "information").write_text(gpus.gpu_information(index, name))


def prepare_etc_pve(node: layout.LabNode = PVE1) -> str:
    """/etc/pve as pmxcfs lays it out on a node, with the lab's certificate and credentials;
    returns the certificate's fingerprint. Guest configs already there are kept."""
    fingerprint = certs.ensure_node_certificate(node)
    pmxcfs.make_layout(node.etc_pve, node.name)
    for relative, (content, mode) in certs.node_files(node).items():
        relative = relative.replace("local/", f"nodes/{node.name}/")
        write_file(node.etc_pve / relative, content, mode)
    secrets = credentials.ensure_credentials()
    write_file(node.etc_pve / Path(NODE_CREDENTIALS).relative_to("/etc/pve"), json.dumps(secrets).encode(), 0o600)
    return fingerprint


def config_lines(schema: Path | None, node: layout.LabNode = PVE1) -> list[str]:
    """The node's own lines in its LXC config."""
    if not Path("/dev/fuse").is_char_device():
        raise LabError("/dev/fuse is missing on this host: a node's /etc/pve is a FUSE filesystem; run `modprobe fuse`")
    node.request_log.parent.mkdir(parents=True, exist_ok=True)
    node.zfs_state.mkdir(parents=True, exist_ok=True)
    node.guestd_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "# the node: /etc/pve (its backing), /proc as a node with the NVIDIA driver shows it, guestd's socket",
        f"lxc.mount.entry = {node.etc_pve} {NODE_CFS_BACKING[1:]} none bind,create=dir 0 0",
        "# pmxcfs's device (common.conf allows c 10:229; LXC's autodev /dev has no fuse node)",
        "lxc.mount.entry = /dev/fuse dev/fuse none bind,create=file 0 0",
        "# pmxcfs mounts it: pve-container's features: fuse=1 (src/PVE/LXC.pm update_lxc_config)",
        "lxc.apparmor.raw = mount fstype=fuse,",
        f"lxc.mount.entry = {PROC_DEVICES} proc/devices none bind,ro 0 0",
        f"lxc.mount.entry = {node.zfs_state} {NODE_ZFS_STATE[1:]} none bind,create=dir 0 0",
        "# /dev/char as udev keeps it on a real node: nvidia-modprobe links /dev/char/MAJ:MIN to each node",
        "# it makes and fails when it cannot (NVIDIA/nvidia-modprobe nvidia-modprobe-utils.c symlink_char_dev)",
        "lxc.mount.entry = tmpfs dev/char tmpfs rw,nosuid,noexec,mode=755,create=dir 0 0",
        "# no NVIDIA node from the lab: its nvidia-modprobe makes them (the node preparation's unit)",
        *gpus.node_device_rules(),
        *container.cgroup_v1_twins(gpus.node_device_rules()),
        "# /run as systemd would mount it, so the socket's bind mount below is not hidden by it",
        "lxc.mount.entry = tmpfs run tmpfs rw,nosuid,nodev,mode=755 0 0",
        f"lxc.mount.entry = {node.guestd_dir} {layout.NODE_GUESTD_DIR[1:]} none bind,create=dir 0 0",
        f"lxc.mount.entry = {node.request_log.parent} {NODE_LOG_DIR[1:]} none bind,create=dir 0 0",
    ]
    if schema:
        lines.append(f"lxc.mount.entry = {schema} {NODE_SCHEMA_DIR[1:]} none bind,ro,create=dir 0 0")
    return lines


def emulator_unit(node: layout.LabNode) -> str:
    return EMULATOR_UNIT.format(
        emulator=NODE_EMULATOR,
        version=layout.PVE_VERSION,
        node=node.name,
        port=layout.API_PORT,
        schema_dir=NODE_SCHEMA_DIR,
        credentials=NODE_CREDENTIALS,
        log_dir=NODE_LOG_DIR,
        request_log=node.request_log.name,
        faults=node.faults.name,
        guestd_dir=layout.NODE_GUESTD_DIR,
    )


def files(with_emulator: bool, node: layout.LabNode = PVE1) -> dict[str, tuple[bytes | str, int]]:
    """Files of the node's root filesystem (written into its fresh upper dir); the emulator
    service is enabled only ``with_emulator`` (the reference schemas exist)."""
    from lab.pve import zipapp

    result = {
        "/usr/bin/nvidia-smi": ((layout.SIM_DIR / "nvidia_smi.py").read_bytes(), 0o755),
        f"{SIM_CONFIG_DIR}/driver-version": (f"{layout.DRIVER_VERSION}\n".encode(), 0o644),
        # the rest of the driver's user space on a node (installed, not enabled, as a package leaves it)
        "/usr/bin/nvidia-modprobe": ((layout.SIM_DIR / "nvidia_modprobe.py").read_bytes(), 0o755),
        "/usr/bin/nvidia-persistenced": (PERSISTENCED, 0o755),
        "/usr/lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT, 0o644),
        "/usr/sbin/pct": ((layout.SOURCE_DIR / "pct.py").read_bytes(), 0o755),
        "/usr/sbin/zfs": (ZFS_COMMAND, 0o755),
        "/usr/bin/pmxcfs": ((layout.SOURCE_DIR / "pmxcfs.py").read_bytes(), 0o755),
        "/etc/systemd/system/pve-cluster.service": (CLUSTER_UNIT.encode(), 0o644),
        "/etc/systemd/system/multi-user.target.wants/pve-cluster.service": (
            "/etc/systemd/system/pve-cluster.service",
            0o777,
        ),
        NODE_EMULATOR: (zipapp.build(), 0o644),
        # the template as `pveam download` leaves it; guestd uses the lab's rootfs in its place
        f"/var/lib/vz/template/cache/{layout.TEMPLATE.rsplit('/', 1)[1]}": (TEMPLATE_STAND_IN, 0o644),
    }
    if with_emulator:
        unit = "/etc/systemd/system/pveproxy.service"
        result[unit] = (emulator_unit(node).encode(), 0o644)
        wants = "/etc/systemd/system/multi-user.target.wants/pveproxy.service"
        result[wants] = (unit, 0o777)  # a str: a symlink (systemctl enable)
    return result


def warn_missing_schema() -> None:
    print(
        "lab: WARNING: the reference API schemas are missing (set SGLANG_PVE_PVE_SCHEMA_DIR or "
        f"provide {layout.SOURCE_DIR.parent.parent / 'shared/reference'}): pve1 runs without its "
        "API emulator; the rest of the lab works",
        flush=True,
    )


def wait_for_api(node: layout.LabNode = PVE1, timeout: float = 30.0) -> None:
    """Wait until the emulator answers HTTPS on the node's address with the pinned CA."""
    context = ssl.create_default_context(cafile=str(layout.PVE_CA))
    deadline = time.monotonic() + timeout
    error: Exception | None = None
    while time.monotonic() < deadline:
        connection = http.client.HTTPSConnection(node.address, layout.API_PORT, context=context, timeout=2)
        try:
            connection.request("GET", "/api2/json/version")
            connection.getresponse().read()  # 401 without a ticket: it answers
            return
        except (OSError, http.client.HTTPException) as failure:
            error = failure
            time.sleep(0.2)
        finally:
            connection.close()
    raise LabError(
        f"the API emulator on {node.name} did not answer in {timeout:.0f} s ({error}); see "
        f"`python -m lab exec {node.name} -- journalctl -u pveproxy`"
    )
