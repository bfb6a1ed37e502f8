"""The real lab: the node pve1 and sglang1, LXC system containers with systemd and sshd, deployed
into over real SSH."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lab import layout
from sglang_pve.agent.phases import PHASES
from sglang_pve.tools import host_files
from tests.conftest import PROJECT

HOST = "sglang1"
# What `lab exec` is given for that guest: its vmid. A hostname names the lowest vmid of the guests
# that have it (lab/guests.py resolve), and the scale lab's sglang1 (201) shares a slot with it once
# both labs ran there: before the default lab's guest existed, `lab exec sglang1` reached the scale
# lab's, and provision() took it for the default guest running.
GUEST = str(layout.SGLANG_VMID)
PYINFRA = str(PROJECT / ".venv" / "bin" / "pyinfra") if (PROJECT / ".venv" / "bin" / "pyinfra").exists() else "pyinfra"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A start's phases as status --json names them (agent/phases.py), a regex alternation: a progress
# line names the phase the server is in when it is read
STARTING = "|".join(phase for phase in PHASES if phase != "ready")

# The measurement tasks' host data (sglang_pve/tools/host_files.py), a directory per lab slot: every
# slot's guest is sglang1, so a promotion one slot's bench test wrote under group_data/ was host data
# for every other slot's deploys meanwhile (CI: a no-change run switched sglang1 to eagle3-2step).
# Set for the whole worker, which pyinfra inherits; unit tests unset it (tests/unit/conftest.py).
HOST_DATA = Path(tempfile.gettempdir()) / f"sglang-pve-host-data-slot{os.environ.get('SGLANG_PVE_LAB_SLOT', '0')}"
if os.environ.get(host_files.HOST_DATA_DIR) != str(HOST_DATA):  # once per worker: a killed run's files go
    shutil.rmtree(HOST_DATA, ignore_errors=True)
    os.environ[host_files.HOST_DATA_DIR] = str(HOST_DATA)


def lab_missing() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    if not shutil.which("lxc-start"):
        return "lxc is not installed (make test installs it)"
    from lab import node

    if node.schema_dir() is None and not layout.LAB_CREATES_SGLANG1:
        return (
            "REFERENCE SCHEMAS MISSING: sglang1 is provisioned through pve1's API emulator, which needs "
            "../shared/reference (or SGLANG_PVE_PVE_SCHEMA_DIR)"
        )
    return None


@pytest.fixture(scope="module")
def lab():
    """The lab, up (idempotent, ~0.1 s when already up), with sglang1 provisioned through pve1's API:
    per module, since test_lab.py and test_pve_node.py take the lab down."""
    reason = lab_missing()
    if reason:
        pytest.skip(reason)
    subprocess.run([sys.executable, "-m", "lab", "up"], cwd=PROJECT, check=True)
    provision()
    return HOST


def guest_running() -> bool:
    return (
        subprocess.run(
            [sys.executable, "-m", "lab", "exec", GUEST, "--", "true"], cwd=PROJECT, capture_output=True, timeout=60
        ).returncode
        == 0
    )


def provision() -> None:
    """sglang1 created through pve1's API by the toolkit itself (tasks/pve_host.py, whose unit makes
    pve1's NVIDIA device nodes as on a real node, then tasks/containers.py): once per session, again
    only after a test module took the lab down."""
    if not guest_running():
        pyinfra("--limit", "pve1", deploy="tasks/pve_host.py")
        pyinfra("--limit", "pve1", deploy="tasks/containers.py")


def lab_node():
    """The toolkit's own client for pve1, from inventory/lab.py (for tests to look and arrange)."""
    import runpy

    from sglang_pve.provision.nodes import Node, node_for

    name, data = runpy.run_path(str(PROJECT / "inventory" / "lab.py"))["pve_nodes"][0]
    node = node_for(name.rsplit("/", 1)[-1], data)  # "@pvenode/pve1": the host is pve1
    return Node(node.host_name, node.settings)  # a fresh one: nothing cached between calls


def on_target(*command: str, check: bool = True, host: str = GUEST) -> subprocess.CompletedProcess:
    """Run a command in the default lab's guest (`GUEST`, its vmid) or in ``host`` (pve1, a vmid;
    python -m lab exec): arguments are passed unchanged."""
    result = subprocess.run(
        [sys.executable, "-m", "lab", "exec", host, "--", *command],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{command} exited {result.returncode}: {result.stdout}{result.stderr}")
    return result


HTTP_STATUS = r"""
import sys, urllib.error, urllib.request
key = sys.stdin.read().strip()
headers = {"Authorization": "Bearer " + key} if key else {}
request = urllib.request.Request("http://127.0.0.1:8000" + sys.argv[1], headers=headers)
try:
    print(urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as error:
    print(error.code)
"""


def lab_api_key() -> str:
    """The servers' api-key `lab up` made (group_data/lab.py names it as the api-key source)."""
    return layout.API_KEY.read_text().strip()


def http_status(path: str, key: str | None = None) -> int:
    """The status the target's server answers a GET of `path` from inside the container, with
    `key` as Bearer token (None: none); the key travels on stdin, never in a command line."""
    result = subprocess.run(
        [sys.executable, "-m", "lab", "exec", GUEST, "--", "python3", "-c", HTTP_STATUS, path],
        cwd=PROJECT,
        input=key or "",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def sh(script: str, check: bool = True) -> str:
    return on_target("bash", "-c", script, check=check).stdout


def pyinfra(
    *args: str, deploy: str = "deploy.py", check: bool = True, yes: bool = True, inventory: str = "inventory/lab.py"
) -> tuple[int, str]:
    """Run the pyinfra CLI against the lab over SSH; return its exit code and output without colours.
    `yes=False` for --dry (pyinfra skips change detection under -y)."""
    command = [PYINFRA, *(["-y"] if yes else []), inventory, deploy, *args]
    result = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    output = ANSI.sub("", result.stdout + result.stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"pyinfra {deploy} {' '.join(args)} exited {result.returncode}:\n{output}")
    return result.returncode, output


def grand_total(output: str) -> dict[str, int]:
    """The 'Grand total' row of pyinfra's results table: operations that changed, failed, did nothing."""
    row = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output)
    assert row, f"no results table in:\n{output[-2000:]}"
    operations, changed, error, unchanged = (0 if cell == "-" else int(cell) for cell in row.groups())
    return {"operations": operations, "changed": changed, "error": error, "unchanged": unchanged}


MANAGED = "/etc/sglang /etc/nccl.conf /etc/systemd/system /root/.zshrc /opt/sglang /var/lib/sglang-pve"


def snapshot() -> str:
    """Digest of every path the deploy manages plus every unit's state: equal means nothing changed."""
    files = sh(
        f"find {MANAGED} -xdev \\( -type f -o -type l \\) -printf '%p %m %u %T@\\n' 2>/dev/null | sort; "
        f"find {MANAGED} -xdev -type f -exec sha1sum {{}} + 2>/dev/null | sort",
        check=False,
    )
    units = sh("systemctl list-units --all --no-legend 'sglang-*' | sort", check=False)
    return files + units


@contextlib.contextmanager
def lock_held_by_another_run():
    """The deploy lock held by another run (bob@desk's bench, agent lock) for the body; its lease."""
    from sglang_pve.deploy import paths

    connection = sh("setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!").strip()  # that run's SSH connection
    agent = ["python3", paths.AGENT]
    taken = on_target(
        *agent, "lock", "--json", "--dir", paths.RELEASES_DIR, "--token", "feedface", "--owner", "bob@desk",
        "--task", "bench", "--wait", "0", "--watch-pid", connection, "--max-hold", "600",
    )  # fmt: skip
    try:
        assert '"held": true' in taken.stdout, taken.stdout
        yield sh(f"cat {paths.RELEASES_DIR}/.lease.json")
    finally:
        on_target(*agent, "unlock", "--dir", paths.RELEASES_DIR, "--token", "feedface")
        sh(f"kill {connection}")


# --- Lifecycle helpers (tests/lab/test_lifecycle.py, bench/stall_to_gpus_free.py) ---------

LIFECYCLE_STATE_DIR = "/var/lib/sglang-pve"
DIAGNOSES_DIR = f"{LIFECYCLE_STATE_DIR}/diagnoses"
AGENT_PYZ = "/opt/sglang-pve/sglang-pve-agent.pyz"
FAULTS_FILE = "/etc/sglang-sim/faults.yaml"
SIM_RUN_DIR = "/run/sglang-sim"
SIM_TREE_MARK = "/root/.sglang-sim-tree"  # digest of the simulator tree installed in the venv


def sim_venv() -> str:
    from sglang_pve.deploy import paths
    from tests.conftest import group_data

    data = group_data("all")
    return paths.venv_path(data["sglang_venvs_dir"], data["sglang_version"])


def on_target_python(script: str, *args: str, timeout: float = 300) -> str:
    """Run a Python script with the target's python3 (arguments passed unchanged); its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "lab", "exec", GUEST, "--", "python3", "-c", script, *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(f"target script exited {result.returncode}: {result.stdout}{result.stderr}")
    return result.stdout


def put_file(path: str, text: str) -> None:
    """Write `text` to `path` on the target (parent directories created)."""
    on_target_python(
        "import os, sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); "
        "open(sys.argv[1], 'w').write(sys.argv[2])",
        path,
        text,
    )


def set_faults(faults: dict) -> None:
    """The simulator's fault file (read at each start), as JSON (a YAML subset); {} = no faults."""
    import json

    put_file(FAULTS_FILE, json.dumps(faults) + "\n" if faults else "")


def refresh_simulator() -> bool:
    """Make the venv's simulator match lab/sglang_sim: the lab keeps the pinned version, so pip
    would skip a changed tree. `lab up` republishes the wheel; reinstall it when the tree changed.
    Returns True when it reinstalled."""
    from lab import index
    from sglang_pve.deploy import paths
    from tests.conftest import PROJECT as ROOT

    sim_dir = ROOT / "lab" / "sglang_sim"
    digest = index.tree_digest(sim_dir)
    version, _ = index.sim_metadata(sim_dir)
    if sh(f"cat {SIM_TREE_MARK} 2>/dev/null", check=False).strip() == digest:
        return False
    subprocess.run([sys.executable, "-m", "lab", "up"], cwd=PROJECT, check=True, capture_output=True)
    # by the deploy's uv: a venv uv built has no pip of its own (deploy/operations/venvs.py); no cache,
    # the republished wheel has the same name
    sh(
        f"{paths.UV_VENV}/bin/uv pip install --quiet --no-cache --reinstall --no-deps --python {sim_venv()}/bin/python "
        f"--index-url {layout.INDEX_URL} 'sglang=={version}' && echo {digest} > {SIM_TREE_MARK}"
    )
    return True


def agent_status() -> dict:
    """`sglang-pve-agent status --json` on the target."""
    import json

    return json.loads(on_target("python3", AGENT_PYZ, "status", "--json").stdout)


def server_status(server: str) -> dict:
    return next(entry for entry in agent_status()["servers"] if entry.get("server") == server)


def status_record(server: str, host: str = GUEST) -> dict:
    """The agents' own record of one server (state.py status/NAME.json): epoch times such as the
    gate's `failed_at` and `last_progress_at` and poststop's `stopped`, for bounds that never read
    a test's clock."""
    import json

    return json.loads(on_target("cat", f"{LIFECYCLE_STATE_DIR}/status/{server}.json", host=host).stdout)


def unit_state(unit: str) -> dict[str, str]:
    out = sh(f"systemctl show -p ActiveState,SubState,Result,MainPID,NRestarts,ExecMainStatus {unit}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def gpu_holders() -> dict[int, list[str]]:
    """{pid: [device, ...]} of every process holding /dev/nvidia* open (O_PATH included), as the
    agent's one scanner (agent/holders.py) finds them."""
    import json

    return {h["pid"]: h["devices"] for h in json.loads(sh(f"python3 -I {AGENT_PYZ} holders"))}


def gpu_memory_used() -> list[int]:
    """memory.used (MiB) of every GPU, from the (fake) nvidia-smi."""
    out = sh("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    return [int(value) for value in out.split()]


def unit_cgroup_pids(unit: str) -> list[int]:
    """PIDs whose cgroup (any hierarchy) is the unit's or below it."""
    pattern = ":/system\\.slice/" + unit.replace(".", "\\.") + "(/|$)"
    out = sh(f"grep -lE '{pattern}' /proc/[0-9]*/cgroup 2>/dev/null", check=False)
    return sorted(int(line.split("/")[2]) for line in out.split() if line.startswith("/proc/"))


def diagnoses(server: str) -> list[str]:
    """Diagnosis file names of one server, oldest first (names sort by time)."""
    out = sh(f"ls {DIAGNOSES_DIR} 2>/dev/null", check=False)
    return sorted(name for name in out.split() if name.startswith(f"{server}-") and name.endswith(".json"))


def read_diagnosis(name: str) -> dict:
    import json

    return json.loads(sh(f"cat {DIAGNOSES_DIR}/{name}"))


def process_info(pid: int) -> dict | None:
    """cmdline, environment and state of one process on the target, None when it is gone."""
    import json

    script = (
        "import json, sys\np = sys.argv[1]\ntry:\n"
        "    cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode().strip()\n"
        "    entries = open(f'/proc/{p}/environ', 'rb').read().decode().split('\\0')\n"
        "    env = dict(e.split('=', 1) for e in entries if '=' in e)\n"
        "    stat = open(f'/proc/{p}/stat').read()\n"
        "    print(json.dumps({'cmdline': cmd, 'environ': env, 'state': stat[stat.rfind(')') + 2]}))\n"
        "except OSError:\n    print('null')\n"
    )
    return json.loads(on_target_python(script, str(pid)))


def kill_pid(pid: int, cmdline_contains: str, timeout: float = 10) -> bool:
    """SIGKILL one process by PID, only if it is still the process meant (its command line
    contains `cmdline_contains`), and wait until it is gone. True when it was killed."""
    import time

    info = process_info(pid)
    if info is None or info["state"] == "Z" or cmdline_contains not in info["cmdline"]:
        return False
    sh(f"kill -KILL {pid}", check=False)
    deadline = time.monotonic() + timeout
    while (info := process_info(pid)) is not None and info["state"] != "Z" and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def restore_servers(deploy: bool = True) -> str:
    """A known state: no faults, no restart history, no failed sglang unit, and (deploy) the
    deploy re-run so the active server (baseline) runs; the deploy's output ("" without it)."""
    set_faults({})
    # a unit left starting or stopping (a test that failed half-way) is stopped: the deploy's
    # `systemctl start` would otherwise join its hung job
    sh(
        "for u in $(systemctl list-units --all --plain --no-legend 'sglang-*.service' "
        "| awk '$3 != \"active\" {print $1}'); "
        "do systemctl stop $u; done; "
        f"rm -f {LIFECYCLE_STATE_DIR}/restarts/*.json; systemctl reset-failed 'sglang-*' 2>/dev/null; true",
        check=False,
    )
    return pyinfra()[1] if deploy else ""
