"""The deploy against the real lab over SSH: idempotency, dry-run purity, diffs, NCCL persistence,
one unit per configuration, exactly one running, clean stop, bad input refused before any change."""

import json
import re

import pytest

from sglang_pve.agent.contract import LOCK_COUNT
from sglang_pve.deploy import paths
from sglang_pve.deploy.facts import unit_host
from sglang_pve.deploy.facts.unit_host import UnitHostInfo
from tests.conftest import PROJECT, group_data
from tests.lab.conftest import (
    HOST,
    grand_total,
    http_status,
    lab_api_key,
    lock_held_by_another_run,
    on_target,
    pyinfra,
    sh,
    snapshot,
)

pytestmark = pytest.mark.lab

SERVERS = ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step")
VENV = paths.venv_path(group_data("all")["sglang_venvs_dir"], group_data("all")["sglang_version"])
TUNED = group_data("all")["nccl_profiles"]["pcie-tuned"]


@pytest.fixture(scope="module")
def deployed(lab):
    pyinfra()
    return lab


def main_pid_environ(server: str) -> dict[str, str]:
    pid = sh(f"systemctl show -p MainPID --value {paths.unit_name(server)}").strip()
    assert pid != "0", f"{server} is not running"
    raw = sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


def active_units() -> set[str]:
    return {s for s in SERVERS if sh(f"systemctl is-active {paths.unit_name(s)}", check=False).strip() == "active"}


def test_second_run_reports_zero_changes(deployed):
    """...and takes no deploy lock: nothing changes, so nothing is written, not even a lease
    (deploy/operations/lock.py: the lock comes with the first change)."""
    count, directory = lock_count(), releases_dir_entry()
    _, output = pyinfra()
    totals = grand_total(output)
    assert totals["changed"] == 0 and totals["error"] == 0 and totals["unchanged"] == totals["operations"] > 0, output
    assert lock_count() == count and count % 2 == 0 and releases_dir_entry() == directory


def lock_count() -> int:
    """The deploy lock's count (agent/lease.py count): odd while held, moved on by every taking."""
    return int(sh(f"cat {paths.RELEASES_DIR}/{LOCK_COUNT}").strip())


def releases_dir_entry() -> str:
    """The releases directory's own mtime: a lease written or removed (the deploy lock taken or
    given back) changes it."""
    return sh(f"stat -c '%n %y' {paths.RELEASES_DIR}")


def test_dry_run_changes_nothing_on_the_target(deployed):
    """Also while another run holds the deploy lock: --dry says who, and takes nothing (deploy/
    operations/lock.py held); it once took the lock at prepare time, and so failed with wait_lock=0."""
    with lock_held_by_another_run() as lease:
        before, directory = snapshot(), releases_dir_entry()
        _, output = pyinfra(
            "--dry", "--data", "nccl_profile=p2p-disabled", "--data", "active_server=eagle3-2step",
            "--data", "wait_lock=0", yes=False,
        )  # fmt: skip
        assert "Detected changes" in output and "1 (sglang1)" in output  # it saw the changes...
        assert snapshot() == before and releases_dir_entry() == directory  # ...and made none
        assert "the deploy lock is held now, by bob@desk (bench) since" in output, output
        assert "the run would refuse at once (wait_lock=0)" in output
        assert sh(f"cat {paths.RELEASES_DIR}/.lease.json") == lease  # still the other run's


def test_dry_diff_shows_one_changed_nccl_variable(deployed):
    profiles = group_data("all")["nccl_profiles"]
    profiles["pcie-tuned"] = TUNED | {"NCCL_NTHREADS": 256}
    before, directory = snapshot(), releases_dir_entry()  # the lock free: not taken either
    _, output = pyinfra("--dry", "--diff", "--data", f"nccl_profiles={json.dumps(profiles)}", yes=False)
    for path in (paths.NCCL_ENV, paths.NCCL_CONF):
        section = output.split(f"Will modify {path}", 1)[1].split("Will ", 1)[0]
        assert "- NCCL_NTHREADS=512" in section and "+ NCCL_NTHREADS=256" in section, output
        assert "@@ " in section and "  NCCL_BUFFSIZE=16777216" in section  # a unified hunk with context
    assert "Will modify the nccl-profile block in /root/.zshrc" in output
    assert "+ export NCCL_NTHREADS=256" in output
    assert snapshot() == before and releases_dir_entry() == directory


def test_profile_reaches_every_place_a_process_starts_from(deployed):
    python = f"{VENV}/bin/python"
    clean = on_target(
        "env", "-i", python, "-c", "import os; print(os.environ.get('NCCL_PROTO'), os.environ.get('NCCL_NTHREADS'))"
    )
    assert clean.stdout.split() == ["LL", "512"]
    spawn = (
        "import multiprocessing as mp, os\n"
        "def child(q): q.put(os.environ.get('NCCL_ALGO'))\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn'); q = ctx.Queue(); p = ctx.Process(target=child, args=(q,)); p.start()\n"
        "    print(q.get(timeout=60)); p.join()\n"
    )
    sh(f"cat > /tmp/spawn_probe.py <<'EOF'\n{spawn}EOF")
    assert on_target("env", "-i", python, "/tmp/spawn_probe.py").stdout.strip() == "Ring"
    zsh = on_target("env", "-i", "HOME=/root", "TERM=dumb", "zsh", "-i", "-c", "echo $NCCL_P2P_LEVEL $NCCL_BUFFSIZE")
    assert zsh.stdout.split()[-2:] == ["SYS", "16777216"]
    assert paths.NCCL_ENV in sh(f"systemctl show -p EnvironmentFiles {paths.unit_name('baseline')}")
    environ = main_pid_environ("baseline")
    assert {k: environ.get(k) for k in TUNED} == {k: str(v) for k, v in TUNED.items()}


def test_switching_profile_changes_all_four_places_and_restarts_the_server(deployed):
    sh("printf '# my own line\\nalias ll=\"ls -l\"\\n' >> /root/.zshrc")
    old_pid = sh("systemctl show -p MainPID --value sglang-baseline.service").strip()
    try:
        _, output = pyinfra("--data", "nccl_profile=p2p-disabled")
        assert grand_total(output)["error"] == 0
        site = sh(f"ls {VENV}/lib/python3*/site-packages/{paths.NCCL_PROFILE_MODULE}.py").strip()
        for path in (paths.NCCL_ENV, paths.NCCL_CONF, site, "/root/.zshrc"):
            text = sh(f"cat {path}")
            assert "NCCL_P2P_DISABLE" in text and "NCCL_PROTO" not in text, path
        assert 'alias ll="ls -l"' in sh("cat /root/.zshrc")  # the user's own lines stay
        environ = main_pid_environ("baseline")
        assert environ.get("NCCL_P2P_DISABLE") == "1" and "NCCL_PROTO" not in environ
        assert sh("systemctl show -p MainPID --value sglang-baseline.service").strip() != old_pid
    finally:
        pyinfra()
    assert main_pid_environ("baseline").get("NCCL_PROTO") == "LL"
    assert sh("tail -2 /root/.zshrc").strip().endswith('alias ll="ls -l"')


def test_one_verified_unit_per_configuration(deployed):
    for server in SERVERS:
        unit = sh(f"systemctl cat {paths.unit_name(server)}")
        # the lab's api-key: SGLang's config is the root-only copy, handed over as a credential
        assert f"--config %d/{server}.yaml" in unit and f"append:{paths.log_path(server)}" in unit
        assert f"LoadCredential={server}.yaml:{paths.secret_config_path(server)}" in unit
        assert "KillMode=mixed" in unit and "LimitNOFILE=" in unit and "LimitMEMLOCK=" in unit
        conflicts = next(line for line in unit.splitlines() if line.startswith("Conflicts="))
        assert set(conflicts.removeprefix("Conflicts=").split()) == {paths.unit_name(s) for s in SERVERS if s != server}
    verify = on_target("systemd-analyze", "verify", *(paths.unit_path(s) for s in SERVERS), check=False)
    assert verify.returncode == 0 and "sglang" not in verify.stdout + verify.stderr, verify.stdout + verify.stderr


EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")
# From inside the server's cgroup (the unit's BPF firewall applies to every process in it): which of
# these addresses a TCP connect reaches. A dropped SYN times out, so the timeout is short.
CONNECT = """
import json, os, socket, sys
if sys.argv[1]:  # join the unit's cgroup in the cgroup2 tree (/sys/fs/cgroup, or .../unified when hybrid)
    root = next(line.split()[4] for line in open("/proc/self/mountinfo") if " - cgroup2 " in line)
    with open(root + sys.argv[1] + "/cgroup.procs", "w") as procs:
        procs.write(str(os.getpid()))
out = {}
for host, port in json.loads(sys.argv[2]):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(3)
    try:
        s.connect((host, port))
        out[f"{host}:{port}"] = "connected"
    except OSError as error:
        out[f"{host}:{port}"] = type(error).__name__
    s.close()
print(json.dumps(out))
"""
# The smallest cgroup_skb program (r0 = 1; exit), loaded with bpf(2): the first thing systemd's IP
# firewall (src/core/bpf-firewall.c) does; x86-64 syscall number.
BPF_LOAD = """
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
code = ctypes.create_string_buffer(struct.pack("<BBhi", 0xB7, 0, 0, 1) + struct.pack("<BBhi", 0x95, 0, 0, 0))
license = ctypes.create_string_buffer(b"GPL")
head = struct.pack("<IIQQ", 8, 2, ctypes.addressof(code), ctypes.addressof(license))  # CGROUP_SKB, 2 insns
attr = ctypes.create_string_buffer(head + bytes(128))
fd = libc.syscall(321, 5, attr, len(attr.raw))
print("loaded" if fd >= 0 else os.strerror(ctypes.get_errno()))
"""


def test_the_hardened_unit_scores_below_2_5_and_its_sandbox_holds(deployed):
    """systemd's own score of the running unit (3.5 before ProtectProc, ProcSubset, PrivateIPC,
    PrivateMounts, SystemCallFilter and IPAddressDeny: systemd-analyze --offline of the previous
    unit on this guest's systemd 252); inside the unit, the server's user sees only its own
    processes and no /proc file but theirs; the toolkit's own view (status, as root) still has it."""
    from lab import layout

    unit = paths.unit_name("baseline")
    score = float(EXPOSURE.search(sh(f"systemd-analyze security {unit}")).group(1))
    assert score < 2.5, score
    shown = dict(
        line.split("=", 1)
        for line in sh(f"systemctl show -p ProtectProc,ProcSubset,PrivateIPC,SystemCallErrorNumber {unit}").split()
    )
    assert shown == {"ProtectProc": "invisible", "ProcSubset": "pid", "PrivateIPC": "yes", "SystemCallErrorNumber": "1"}
    # the GPU test applies this very list where systemd cannot (tests/gpu/unit_sandbox.py)
    table = json.loads((PROJECT / "tests" / "gpu" / "unit_syscalls.json").read_text())
    if sh("systemctl --version").splitlines()[0] == table["systemd"]:
        assert sh(f"systemctl show -p SystemCallFilter --value {unit}").split() == table["allow"]
    pid = sh(f"systemctl show -p MainPID --value {unit}").strip()
    uid, gid = sh(f"stat -c '%u %g' /proc/{pid}").split()
    listing, owners = sh(
        f"nsenter -t {pid} -m -S {uid} -G {gid} sh -c 'ls /proc; echo ---; stat -c %u /proc/[0-9]*'", check=False
    ).split("---")
    seen = listing.split()
    assert pid in seen and "1" not in seen and "meminfo" not in seen, seen  # PID 1 is root's
    assert set(owners.split()) == {uid}, owners
    # the agent (root, outside the unit's namespace) still reads the server's /proc: its GPU
    # holders by PID, attributed to the unit, and the server's phase from its log
    status = json.loads(sh(f"{paths.TARGET_PYTHON} -I {paths.AGENT} status --json"))
    assert status["holders"] and {(h["ours"], h["unit"]) for h in status["holders"]} == {(True, unit)}
    assert [s["phase"] for s in status["servers"] if s["server"] == "baseline"] == ["ready"]

    # IP: the unit's allow list is the loopback, the guest's own address and the lab host
    # (server_clients); pve1, the node (its API, its SSH), is not reached from inside the unit.
    cgroup = sh(f"systemctl show -p ControlGroup --value {unit}").strip()
    targets = [
        ("127.0.0.1", 8000),
        (layout.SGLANG_HOSTS[HOST], 8000),
        (layout.BRIDGE_ADDRESS, layout.INDEX_PORT),
        (layout.NODE_ADDRESS, layout.API_PORT),
        (layout.NODE_ADDRESS, 22),
    ]
    reached = json.loads(on_target("python3", "-c", CONNECT, cgroup, json.dumps(targets)).stdout)
    assert reached == {
        "127.0.0.1:8000": "connected",
        f"{layout.SGLANG_HOSTS[HOST]}:8000": "connected",
        f"{layout.BRIDGE_ADDRESS}:{layout.INDEX_PORT}": "connected",
        f"{layout.NODE_ADDRESS}:{layout.API_PORT}": "TimeoutError",
        f"{layout.NODE_ADDRESS}:22": "TimeoutError",
    }, reached
    # The same guest outside the unit reaches the node: the unit's firewall dropped those, not the lab.
    outside = json.loads(on_target("python3", "-c", CONNECT, "", json.dumps(targets[3:])).stdout)
    assert set(outside.values()) == {"connected"}, outside
    # This is a privileged container (inventory/lab.py): systemd loads its firewall. Root of a user
    # namespace, as root of an unprivileged container is, may not load one on this kernel
    # (kernel.unprivileged_bpf_disabled, 2 on Debian's and Ubuntu's kernels): there systemd goes on
    # without IPAddressDeny (the rest of the sandbox is seccomp and namespaces, which hold).
    assert on_target("python3", "-c", BPF_LOAD).stdout.strip() == "loaded"
    fact = UnitHostInfo().command()
    assert unit_host.parse(sh(fact).splitlines()).ip_filter is True  # so preflight warns of nothing
    if sh("cat /proc/sys/kernel/unprivileged_bpf_disabled").strip() != "0":
        in_userns = on_target("unshare", "--user", "--map-root-user", "python3", "-c", BPF_LOAD).stdout.strip()
        assert in_userns == "Operation not permitted", in_userns
        # ... and the fact says so there (preflight then warns: deploy/preflight/auth.py ip_filter_warnings)
        said = on_target("unshare", "--user", "--map-root-user", "sh", "-c", fact).stdout
        assert unit_host.parse(said.splitlines()).ip_filter is False, said


def test_active_server_is_data_and_exactly_one_runs(deployed):
    assert active_units() == {"baseline"}
    try:
        _, output = pyinfra("--data", "active_server=eagle3-3step")
        assert grand_total(output)["error"] == 0
        assert active_units() == {"eagle3-3step"}
        assert sh("systemctl is-enabled sglang-baseline.service", check=False).strip() == "disabled"
        flags = sh(f"cat {paths.server_config_path('eagle3-3step')}")
        assert "speculative-num-steps: 3" in flags and "speculative-num-draft-tokens: 4" in flags
    finally:
        pyinfra()
    assert active_units() == {"baseline"}


def test_a_deploy_while_the_servers_start_waits_at_boot_changes_nothing(deployed):
    """Right after a boot the server's start waits as a job for its After= units (network-online.target),
    ActiveState still inactive: a deploy then (the fresh-clone CI's, after a snapshot rollback) read it
    as stopped and switched again, its start joining the queued one (agent/systemd.py state). Here a
    oneshot that sleeps holds the start back the same way, for real systemd to queue it."""
    unit, blocker = paths.unit_name("baseline"), "sgpve-test-boot.service"
    dropin = f"/run/systemd/system/{unit}.d/zz-test-boot.conf"
    sh(
        f"printf '[Service]\\nType=oneshot\\nExecStart=/bin/sleep 300\\n' > /run/systemd/system/{blocker} && "
        f"mkdir -p $(dirname {dropin}) && printf '[Unit]\\nAfter={blocker}\\n' > {dropin} && systemctl daemon-reload"
    )
    try:
        sh(f"systemctl stop {unit} && systemctl start --no-block {blocker} {unit}")
        queued = dict(line.split("=", 1) for line in sh(f"systemctl show -p ActiveState,Job {unit}").split())
        assert queued["ActiveState"] == "inactive" and queued["Job"], queued  # what systemd shows at boot
        _, output = pyinfra()
        assert grand_total(output)["changed"] == 0, output
        assert sh(f"systemctl show -p Job --value {unit}").strip() == queued["Job"]  # still its own start
    finally:
        # the queued start goes on once the oneshot is stopped: `start` joins it and returns with its gate
        sh(f"rm -f {dropin} /run/systemd/system/{blocker} && systemctl daemon-reload && systemctl stop {blocker}")
        sh(f"systemctl start {unit}")
    assert active_units() == {"baseline"}


def test_the_demo_server_answers_401_without_the_key_and_200_with_it(deployed):
    """`make demo` deploys this inventory and its data as they are: secure by default, the server
    gets the api-key `lab up` made (group_data/lab.py), and SGLang's middleware wants it
    everywhere but the probes (srt/utils/auth.py decide_request_auth, as lab/sglang_sim does)."""
    key = lab_api_key()
    assert len(key) >= 32
    assert http_status("/v1/models") == 401 and http_status("/generate") == 401
    assert http_status("/v1/models", "not-" + key) == 401
    assert http_status("/v1/models", key) == 200 and http_status("/get_model_info", key) == 200
    assert http_status("/health") == 200  # probes need no key


def test_started_unit_is_ready_and_stop_leaves_no_process(deployed):
    unit = paths.unit_name("baseline")
    assert "The server is fired up and ready to roll!" in sh(f"cat {paths.log_path('baseline')}")
    health = on_target(
        f"{VENV}/bin/python",
        "-c",
        "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/health').status)",
    )
    assert health.stdout.strip() == "200"
    cgroup_pids = sh(f"systemctl show -p ControlGroup --value {unit}").strip()
    assert cgroup_pids
    try:
        sh(f"systemctl stop {unit}")
        leftovers = sh(
            "for p in /proc/[0-9]*; do grep -qz SGLANG_PVE_UNIT= $p/environ 2>/dev/null && echo ${p#/proc/}; done",
            check=False,
        )
        assert leftovers.strip() == ""
        holders = sh("find /proc/[0-9]*/fd -lname '/dev/nvidia*' 2>/dev/null", check=False)
        assert holders.strip() == ""
    finally:
        pyinfra()
    assert active_units() == {"baseline"}


@pytest.mark.parametrize(
    "data, key",
    [
        ("nccl_profile=fast", "nccl_profile"),
        ('nccl_profiles={"pcie-tuned": {"NCCL_PROTO": "LL256"}}', "NCCL_PROTO"),
        ("sglang_version=0.5", "sglang_version"),
        ("active_server=eagle4", "active_server"),
    ],
)
def test_bad_input_is_refused_before_any_remote_change(deployed, data, key):
    before = snapshot()
    code, output = pyinfra("--data", data, check=False)
    assert code != 0 and key in output and "Fix:" in output, output
    assert "Starting operation" not in output
    assert snapshot() == before
