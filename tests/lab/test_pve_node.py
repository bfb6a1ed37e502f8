"""The lab's Proxmox node pve1 for real: a system container serving the API emulator over HTTPS,
whose guests are real LXC system containers made by guestd on the lab host.

One `up` and one guest (created and started through the API with proxmoxer, as root@pam with the
password) are shared by the module; `down` runs last. Needs root, LXC and the reference schemas
(../shared/reference; skipped loudly without them).
"""

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from lab import certs, container, gpus, guestd, guests, layout, lifecycle, mounts, node, procs
from lab.network import link_exists
from tests.lab.conftest import pyinfra

pytestmark = [
    pytest.mark.lab,
    pytest.mark.lab_down,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root"),
    pytest.mark.skipif(not shutil.which("lxc-start"), reason="lxc-start missing (apt-get install lxc)"),
]

REPO = Path(__file__).resolve().parents[2]
VMID = 150
HOSTNAME = "lab-guest"
GUEST_IP = f"{layout.SUBNET}.50"
GPU_NODES = [f"/dev/nvidia{i}" for i in range(layout.GPU_COUNT)] + [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
]
CLASSIC_GPU = "/dev/nvidia7"
MADE_BY_LAB_UP: list[str] = []  # pve1's /dev/nvidia* right after `lab up` (the lab fixture)
RAW_LINES = [
    "lxc.mount.entry: /shared shared none bind,create=dir 0 0",
    "lxc.cgroup2.devices.allow: c 195:7 rwm",
    f"lxc.mount.entry: {CLASSIC_GPU} {CLASSIC_GPU[1:]} none bind,optional,create=file",
]


def api():
    from proxmoxer import ProxmoxAPI

    password = json.loads(layout.PVE_CREDENTIALS.read_text())["users"]["root@pam"]["password"]
    return ProxmoxAPI(
        layout.NODE_ADDRESS,
        port=layout.API_PORT,
        user="root@pam",
        password=password,
        verify_ssl=str(layout.PVE_CA),
        timeout=30,
    )


def wait_task(client, upid: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.nodes(layout.NODE).tasks(upid).status.get()
        if status["status"] == "stopped":
            assert status["exitstatus"] == "OK", (upid, status, client.nodes(layout.NODE).tasks(upid).log.get())
            return status
        time.sleep(0.2)
    raise AssertionError(f"task {upid} still running after {timeout} s")


def lab_exec(host: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", "exec", host, "--", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ssh(hostname: str, sock=None, host_keys: dict | None = None) -> paramiko.SSHClient:
    """root@hostname with the lab key; host keys pinned (KNOWN_HOSTS or ``host_keys``), never TOFU."""
    client = paramiko.SSHClient()
    if host_keys is None:
        client.load_host_keys(str(layout.KNOWN_HOSTS))
    else:
        for kind, key in host_keys.items():
            client.get_host_keys().add(hostname, kind, key)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        hostname,
        username="root",
        key_filename=str(layout.SSH_KEY),
        sock=sock,
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    return client


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    _, stdout, stderr = client.exec_command(command, timeout=60)
    out, err = stdout.read().decode(), stderr.read().decode()
    return stdout.channel.recv_exit_status(), out, err


@pytest.fixture(scope="module")
def lab():
    if node.schema_dir() is None:
        pytest.skip(
            "REFERENCE SCHEMAS MISSING: pve1 has no API emulator (set SGLANG_PVE_PVE_SCHEMA_DIR "
            "or provide ../shared/reference)"
        )
    lifecycle.down()  # so `up` boots pve1 afresh, as a node boots (this module ends with a down too)
    lifecycle.up()
    MADE_BY_LAB_UP[:] = lab_exec(layout.NODE, "sh", "-c", "ls /dev/nvidia* 2>/dev/null").stdout.split()
    pyinfra("--limit", layout.NODE, deploy="tasks/pve_host.py")  # its unit runs pve1's nvidia-modprobe
    client = api()
    if VMID in {int(ct["vmid"]) for ct in client.nodes(layout.NODE).lxc.get()}:
        if client.nodes(layout.NODE).lxc(VMID).status.current.get()["status"] == "running":
            wait_task(client, client.nodes(layout.NODE).lxc(VMID).status.stop.post())
        wait_task(client, client.nodes(layout.NODE).lxc(VMID).delete())
    return client


@pytest.fixture(scope="module")
def guest(lab):
    """Guest VMID, created through the API with the lab's GPUs as devN and /shared as a raw
    mount entry, started, and booted (systemd, sshd)."""
    # every GPU node as devN but one, which gets the classic raw lines (below)
    gpu_options = {f"dev{i}": f"{path},mode=0666" for i, path in enumerate(GPU_NODES) if path != CLASSIC_GPU}
    upid = lab.nodes(layout.NODE).lxc.post(
        vmid=VMID,
        hostname=HOSTNAME,
        ostemplate=layout.TEMPLATE,
        storage="local-lvm",
        rootfs="local-lvm:4",
        cores=2,
        memory=2048,
        swap=0,
        unprivileged=0,
        net0=f"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:01:50,ip={GUEST_IP}/24,type=veth",
        **{"ssh-public-keys": layout.SSH_KEY.with_suffix(".pub").read_text()},
        **gpu_options,
    )
    wait_task(lab, upid)
    # raw lxc.* lines are not settable through the API: an SSH edit of the config, as in production
    conf = node.ETC_PVE / "lxc" / f"{VMID}.conf"
    conf.write_text(conf.read_text() + "".join(f"{line}\n" for line in RAW_LINES))
    wait_task(lab, lab.nodes(layout.NODE).lxc(VMID).status.start.post())
    wait_booted()
    return VMID


def wait_booted(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = lab_exec(HOSTNAME, "systemctl", "is-system-running").stdout.strip()
        if state in ("running", "degraded") and lab_exec(HOSTNAME, "systemctl", "is-active", "ssh").returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"{HOSTNAME} did not boot: {state}")


def pct(*args: str) -> subprocess.CompletedProcess:
    return lab_exec(layout.NODE, "pct", *args)


def test_pve1_is_a_system_container_reached_over_ssh(lab):
    with ssh(layout.NODE_ADDRESS) as client:
        code, out, _ = run(client, "systemctl is-system-running; systemctl is-active pveproxy; hostname")
    assert out.split()[1:] == ["active", layout.NODE] and out.split()[0] in ("running", "degraded")


def test_api_answers_over_https_with_the_pinned_certificate(lab):
    context = ssl.create_default_context(cafile=str(layout.PVE_CA))
    with socket.create_connection((layout.NODE_ADDRESS, layout.API_PORT), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=layout.NODE_ADDRESS) as tls:
            served = ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).encode()
    assert certs.fingerprint(served) == layout.PVE_FINGERPRINT.read_text().strip()
    assert lab.version.get()["version"].startswith(str(layout.PVE_VERSION))
    # a client that trusts only the system CAs refuses the node's certificate
    with pytest.raises(ssl.SSLCertVerificationError):
        with socket.create_connection((layout.NODE_ADDRESS, layout.API_PORT), timeout=5) as raw:
            ssl.create_default_context().wrap_socket(raw, server_hostname=layout.NODE_ADDRESS)
    assert oct(layout.PVE_CREDENTIALS.stat().st_mode & 0o777) == "0o600"
    node_copy = lab_exec(layout.NODE, "stat", "-c", "%a %U", node.NODE_CREDENTIALS).stdout.split()
    assert node_copy == ["600", "root"]


def test_proc_devices_names_the_uvm_major_the_nodes_carry(lab):
    majors = lab_exec(layout.NODE, "awk", '$2=="nvidia-uvm"{print $1}', "/proc/devices").stdout.split()
    nodes = lab_exec(layout.NODE, "stat", "-c", "%Hr %Lr", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools").stdout.split()
    assert len(majors) == 1 and nodes == [majors[0], "0", majors[0], "1"]
    assert int(majors[0]) == gpus.uvm_major() and int(majors[0]) not in (195, 509, 510)
    assert "195 nvidia\n" in lab_exec(layout.NODE, "cat", "/proc/devices").stdout
    version = lab_exec(layout.NODE, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout
    assert set(version.split()) == {layout.DRIVER_VERSION}
    assert layout.DRIVER_VERSION in lab_exec(layout.NODE, "cat", "/proc/driver/nvidia/version").stdout


def uvm_pair() -> list[str]:
    return lab_exec(layout.NODE, "stat", "-c", "%Lr", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools").stdout.split()


def test_pve1s_nvidia_nodes_are_made_by_its_tools_not_by_lab_up(lab):
    """lab up leaves pve1 without NVIDIA nodes; the node preparation's unit (nvidia-modprobe, as
    NVIDIA's source makes them) made every one, linked from /dev/char as the real tool links them."""
    assert MADE_BY_LAB_UP == []
    made = lab_exec(layout.NODE, "sh", "-c", "stat -c '%n %Hr:%Lr %a' /dev/nvidia*").stdout.splitlines()
    uvm = gpus.uvm_major()
    assert sorted(made) == sorted(
        [*(f"/dev/nvidia{i} 195:{i} 666" for i in range(layout.GPU_COUNT)), "/dev/nvidiactl 195:255 666"]
        + [f"/dev/nvidia-uvm {uvm}:0 666", f"/dev/nvidia-uvm-tools {uvm}:1 666"]
    )
    assert lab_exec(layout.NODE, "readlink", f"/dev/char/{uvm}:1").stdout.strip() == "../nvidia-uvm-tools"


def test_node_has_the_driver_user_space(lab):
    """nvidia-modprobe as NVIDIA's source has it: under -u each -c is a uvm base minor (the node
    unit's old command moved the pair to 7/8), -u -c=0 puts it back; and nvidia-persistenced."""
    assert lab_exec(layout.NODE, "nvidia-modprobe", "-u", *(f"-c={i}" for i in range(8))).returncode == 0
    assert uvm_pair() == ["7", "8"]
    assert lab_exec(layout.NODE, "nvidia-modprobe", "-u", "-c=0").returncode == 0
    assert uvm_pair() == ["0", "1"]
    assert lab_exec(layout.NODE, "nvidia-modprobe", "--no-such-option").returncode == 1
    state = lab_exec(layout.NODE, "systemctl", "show", "-p", "LoadState", "nvidia-persistenced").stdout
    assert state.strip() == "LoadState=loaded"


def test_guest_boots_on_the_bridge_and_is_reached_through_the_node(guest):
    # the host key is new (made at create) and learned through the node, never on first use
    with ssh(layout.NODE_ADDRESS) as node_client:
        code, host_key, err = run(node_client, f"pct exec {guest} -- cat /etc/ssh/ssh_host_ed25519_key.pub")
        assert code == 0, err
        kind, key = host_key.split()[:2]
        assert key not in layout.KNOWN_HOSTS.read_text()
        channel = node_client.get_transport().open_channel("direct-tcpip", (GUEST_IP, 22), ("127.0.0.1", 0))
        with ssh(GUEST_IP, sock=channel, host_keys={kind: paramiko.Ed25519Key(data=base64.b64decode(key))}) as client:
            code, out, err = run(
                client, "hostname; systemctl is-system-running; ls /dev/nvidia*; nvidia-smi -L | wc -l"
            )
    assert code == 0, err
    lines = out.split()
    assert lines[0] == HOSTNAME and lines[1] in ("running", "degraded")
    assert sorted(lines[2:-1]) == sorted(GPU_NODES) and lines[-1] == str(layout.GPU_COUNT)
    assert lab_exec(HOSTNAME, "ls", "/shared/models").stdout.split(), "the raw mount entry's /shared"


def test_guest_gpus_are_allowed_by_the_device_cgroup(guest):
    for path in ("/dev/nvidia0", CLASSIC_GPU):  # devN, and the classic raw lines
        read = lab_exec(str(guest), "head", "-c1", path)
        assert "No such device or address" in read.stderr, path  # allowed, no driver (EPERM if denied)
    majors = lab_exec(str(guest), "stat", "-c", "%Hr", "/dev/nvidia-uvm").stdout.strip()
    assert int(majors) == gpus.uvm_major()


def test_pct_list_config_exec(guest):
    listing = pct("list").stdout.splitlines()
    assert listing[0].split() == ["VMID", "Status", "Lock", "Name"]
    assert [str(guest), "running", HOSTNAME] in [line.split() for line in listing[1:]]
    lines = pct("config", str(guest)).stdout.splitlines()
    config = dict(line.split(": ", 1) for line in lines)
    assert config["hostname"] == HOSTNAME and config["dev0"] == "/dev/nvidia0,mode=0666"
    assert lines[-len(RAW_LINES) :] == RAW_LINES
    result = pct("exec", str(guest), "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert pct("status", str(guest)).stdout.strip() == "status: running"
    script = (
        f"printf 'a b\\n' > /tmp/in && pct push {guest} /tmp/in /root/pushed --perms 0640 && "
        f"pct pull {guest} /root/pushed /tmp/out && cat /tmp/out"
    )
    assert lab_exec(layout.NODE, "sh", "-c", script).stdout == "a b\n"
    assert lab_exec(HOSTNAME, "stat", "-c", "%a", "/root/pushed").stdout.strip() == "640"


def test_prometheus_pve_exporter_scrapes_pve1(guest, tmp_path):
    """A real third-party client, run as its users run it: prometheus-pve-exporter's own process
    (gunicorn), configured with the lab's API token and CA, scraped over HTTP; it reaches pve1
    over the lab network, and every call it makes answers (its first, /cluster/status and
    /cluster/resources, were 501 before the emulator served them)."""
    import urllib.request

    from lab import credentials

    secret = json.loads(layout.PVE_CREDENTIALS.read_text())["tokens"][credentials.TOKEN_ID]["secret"]
    user, _, token = credentials.TOKEN_ID.partition("!")
    config = tmp_path / "pve.yml"
    config.write_text(
        json.dumps(
            {"default": {"user": user, "token_name": token, "token_value": secret, "verify_ssl": str(layout.PVE_CA)}}
        )
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PVE_")}
    listen = ["--web.listen-address", f"127.0.0.1:{port}"]
    exporter = subprocess.Popen(
        [sys.executable, "-m", "pve_exporter", "--config.file", str(config), *listen],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    target = f"{layout.NODE_ADDRESS}:{layout.API_PORT}"
    url = f"http://127.0.0.1:{port}/pve?target={target}&cluster=1&node=1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as response:
                    metrics = response.read().decode()
                break
            except OSError:
                assert exporter.poll() is None, exporter.stderr.read().decode()
                assert time.monotonic() < deadline, "the exporter did not answer within 60 s"
                time.sleep(0.5)
    finally:
        exporter.terminate()  # the process this test started, by its pid
        exporter.wait(timeout=30)
    lines = set(metrics.splitlines())
    assert f'pve_up{{id="node/{layout.NODE}"}} 1.0' in lines and f'pve_up{{id="lxc/{guest}"}} 1.0' in lines
    assert (
        f'pve_guest_info{{id="lxc/{guest}",name="{HOSTNAME}",node="{layout.NODE}",tags="",template="0",type="lxc"}} 1.0'
        in lines
    )
    assert f'pve_memory_size_bytes{{id="lxc/{guest}"}} 2.147483648e+09' in lines
    assert f'pve_up{{id="storage/{layout.NODE}/local-lvm"}} 1.0' in lines


# pve-cluster src/pmxcfs/ (7091d92e), each line a rule: pmxcfs.c cfs_fuse_getattr (owner, modes,
# priv/ per cfs-utils.c path_is_private), cfs_fuse_chmod, cfs_fuse_chown, memdb.c memdb_pwrite
# (MEMDB_MAX_FILE_SIZE), the absent link op, memdb_rename, the links made in pmxcfs.c main.
PMXCFS_PROBE = r"""
import errno, os, stat
def mode(p): st = os.lstat(p); return oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid
def fails(call, *args):
    try: call(*args)
    except OSError as e: return errno.errorcode[e.errno]
    return "ok"
conf = "/etc/pve/lxc/%d.conf" % VMID
print("fstype", [l.split()[2] for l in open("/proc/mounts") if l.split()[1] == "/etc/pve"])
print("conf", mode(conf), "ca", mode("/etc/pve/pve-root-ca.pem"), "priv", mode("/etc/pve/priv"))
print("privfile", mode("/etc/pve/priv/lab-credentials.json"), "lxcdir", mode("/etc/pve/nodes/pve1/lxc"))
print("links", {l: os.readlink("/etc/pve/" + l) for l in ("local", "lxc", "qemu-server", "openvz")})
print("chmod644", fails(os.chmod, conf, 0o644), "chmod640", fails(os.chmod, conf, 0o640))
print("chown1", fails(os.chown, conf, 1, -1), "chownwww", fails(os.chown, conf, 0, 33))
print("link", fails(os.link, conf, "/etc/pve/lxc/hard"), "symlink", fails(os.symlink, "x", "/etc/pve/lxc/soft"))
def big():
    with open("/etc/pve/big.tmp", "wb") as f: f.write(b"x" * (1024 * 1024 + 1))
print("big", fails(big)); os.unlink("/etc/pve/big.tmp")
with open("/etc/pve/lxc/moved.tmp", "w") as f: f.write("x")
print("rename", fails(os.rename, "/etc/pve/lxc/moved.tmp", "/etc/pve/moved.tmp")); os.unlink("/etc/pve/moved.tmp")
"""


def test_etc_pve_is_a_fuse_filesystem_with_pmxcfss_rules(guest):
    result = lab_exec(layout.NODE, "python3", "-c", PMXCFS_PROBE.replace("VMID", str(guest)))
    seen = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert seen["fstype"] == "['fuse']", result.stderr
    assert seen["conf"].startswith("('0o640', 0, 33) ca ('0o640', 0, 33) priv ('0o700', 0, 33)")
    assert seen["privfile"] == "('0o600', 0, 33) lxcdir ('0o755', 0, 33)"
    links = {"local": "nodes/pve1", "lxc": "nodes/pve1/lxc", "qemu-server": "nodes/pve1/qemu-server"}
    assert seen["links"] == str(links | {"openvz": "nodes/pve1/openvz"})
    assert seen["chmod644"] == "EPERM chmod640 ok" and seen["chown1"] == "EPERM chownwww ok"
    assert seen["link"].split()[0] in ("EPERM", "ENOSYS") and seen["link"].endswith("symlink ENOSYS")
    assert seen["big"] == "EFBIG" and seen["rename"] == "ok"


def test_an_api_write_waits_for_the_config_lock_any_node_process_holds(lab, guest):
    """The emulator on pve1 takes /run/lock/lxc/pve-config-<vmid>.lock like PVE, so a holder on the
    node (here util-linux flock, as the toolkit's raw edit holds it) keeps it waiting."""
    lock = f"/run/lock/lxc/pve-config-{guest}.lock"
    hold = ["flock", "-x", lock, "-c", "echo held; sleep 3; touch /tmp/released"]
    holder = subprocess.Popen(
        [sys.executable, "-m", "lab", "exec", layout.NODE, "--", *hold],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    lab.nodes(layout.NODE).lxc(guest).config.put(description="written under the lock")
    assert lab_exec(layout.NODE, "test", "-e", "/tmp/released").returncode == 0  # the PUT waited for it
    assert holder.wait() == 0
    assert "written under the lock" in lab.nodes(layout.NODE).lxc(guest).config.get()["description"]


def test_pct_unlock_removes_a_lock_and_exec_refuses_a_missing_or_stopped_container(lab, guest):
    conf = node.ETC_PVE / "nodes" / layout.NODE / "lxc" / f"{guest}.conf"
    conf.write_text(conf.read_text().replace("arch:", "lock: backup\narch:", 1))
    assert "lock: backup" in pct("config", str(guest)).stdout
    assert pct("unlock", str(guest)).returncode == 0 and "lock:" not in conf.read_text()
    result = pct("unlock", str(guest))
    assert (result.returncode, result.stderr) == (255, "no lock found trying to remove any lock\n")
    result = pct("exec", str(VMID + 9), "--", "true")
    assert result.stderr == f"Configuration file 'nodes/{layout.NODE}/lxc/{VMID + 9}.conf' does not exist\n"
    assert pct("exec", str(guest)).stderr == "missing command\n"


def test_snapshot_then_rollback_restores_the_root_filesystem(lab, guest):
    ct = lab.nodes(layout.NODE).lxc(guest)
    assert lab_exec(HOSTNAME, "sh", "-c", "echo before > /root/marker").returncode == 0
    assert pct("snapshot", str(guest), "before").returncode == 0
    assert lab_exec(HOSTNAME, "sh", "-c", "echo after > /root/marker").returncode == 0
    assert "before" in pct("listsnapshot", str(guest)).stdout
    wait_task(lab, ct.snapshot("before").rollback.post(start=1))
    wait_booted()
    assert lab_exec(HOSTNAME, "cat", "/root/marker").stdout == "before\n"
    wait_task(lab, ct.snapshot("before").delete())


def test_unprivileged_guest_gets_an_id_map_over_a_shifted_rootfs(lab, guest):
    vmid, hostname = VMID + 1, "lab-unprivileged"
    wait_task(
        lab,
        lab.nodes(layout.NODE).lxc.post(
            vmid=vmid,
            hostname=hostname,
            ostemplate=layout.TEMPLATE,
            rootfs="local-lvm:4",
            unprivileged=1,
            net0=f"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:01:51,ip={layout.SUBNET}.51/24,type=veth",
            dev0="/dev/nvidia0,mode=0666",
            mp0="/shared,mp=/shared,ro=1",
            start=1,
        ),
    )
    try:
        deadline = time.monotonic() + 60
        while lab_exec(hostname, "systemctl", "is-active", "ssh").stdout.strip() != "active":
            assert time.monotonic() < deadline, "the unprivileged guest did not boot"
            time.sleep(0.2)
        assert lab_exec(hostname, "cat", "/proc/self/uid_map").stdout.split() == ["0", str(guests.UID_SHIFT), "65536"]
        assert lab_exec(hostname, "stat", "-c", "%u", "/root", "/etc/ssh/ssh_host_ed25519_key").stdout.split() == [
            "0",
            "0",
        ]
        assert "No such device or address" in lab_exec(hostname, "head", "-c1", "/dev/nvidia0").stderr
        assert lab_exec(hostname, "nvidia-smi", "-L").stdout.count("GPU ") == 1  # only dev0 passed through
        # the node's storage is owned by host root, which the id map shows as nobody (notes/proxmox.md 1.4)
        assert lab_exec(hostname, "stat", "-c", "%U", "/shared/models").stdout.strip() == "nobody"
    finally:
        wait_task(lab, lab.nodes(layout.NODE).lxc(vmid).status.stop.post())
        wait_task(lab, lab.nodes(layout.NODE).lxc(vmid).delete())
    assert vmid not in guests.known()


def test_every_request_of_this_module_passed_the_schema(lab, guest):
    from lab.pve import requestlog

    entries = requestlog.read(layout.PVE_REQUEST_LOG)
    assert {"/access/ticket", f"/nodes/{layout.NODE}/lxc"} <= {entry["path"] for entry in entries}
    assert requestlog.schema_violations(entries) == []
    # secrets never reach the log
    secrets = json.loads(layout.PVE_CREDENTIALS.read_text())
    assert secrets["users"]["root@pam"]["password"] not in layout.PVE_REQUEST_LOG.read_text()


def test_up_restarts_a_dead_guestd_and_removes_stale_guests(lab, guest):
    init = container.init_pid(guests.name(guest))
    dead = guestd.pid()
    os.kill(dead, signal.SIGKILL)
    # a guest left by a lab killed half-way: its volume and dir, but no config in /etc/pve
    guests.create(VMID + 2, {}, layout.TEMPLATE, f"local-lvm:vm-{VMID + 2}-disk-0", None)

    lifecycle.up()

    assert guestd.pid() not in (None, dead)
    assert VMID + 2 not in guests.known() and not guests.volume_dir(f"local-lvm:vm-{VMID + 2}-disk-0").exists()
    assert container.init_pid(guests.name(guest)) == init  # guests outlive guestd, as CTs outlive pvedaemon
    assert pct("status", str(guest)).stdout.strip() == "status: running"


def _cgroups(name: str) -> list[Path]:
    return [p for relative in layout.cgroup_dirs(name).values() for p in Path("/sys/fs/cgroup").glob(f"*/{relative}")]


def test_down_removes_every_guest_guestd_and_the_node(guest):
    init = container.init_pid(guests.name(guest))
    pids = {init, container.init_pid(layout.NODE), guestd.pid()}
    veths = container.veth_pairs(guests.name(guest)) + [layout.veth_name(layout.NODE)]

    lifecycle.down()

    assert not [pid for pid in pids if procs.alive(pid)]
    assert mounts.mounts_under(layout.LAB_DIR) == []
    assert not [veth for veth in veths if link_exists(veth)] and not link_exists(layout.BRIDGE)
    assert not _cgroups(guests.name(guest)) and not _cgroups(layout.NODE)
    assert guests.known() == {} and not layout.VOLUMES_DIR.exists()
    assert not layout.GUESTD_SOCKET.exists() and container.state(layout.NODE) == "ABSENT"
