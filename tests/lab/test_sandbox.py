"""Nothing read from a model folder runs as root: a configuration_kimi_k25.py planted in the lab's
model folder (config.json's auto_map names it; the servers run with trust-remote-code) is run by
SGLang's parser at preflight and by the server, and the simulator loads it the way transformers
does (lab/sglang_sim/sglang/srt/remote_code.py). The preflight judge runs it as the server's user,
in the server's sandbox (sglang_pve/deploy/sandbox.py), under --dry and in a deploy; root never.
And the unit's root steps (ExecStart*=+) get none of the server's environment (HOME, caches, env:)."""

import re

import pytest
import yaml

from lab import layout
from sglang_pve.deploy import paths
from tests.conftest import PROJECT
from tests.lab.conftest import pyinfra, restore_servers, sh, unit_cgroup_pids

pytestmark = pytest.mark.lab

MODEL = ("shared", "models", "Kimi-K2.5-INT4")  # under the lab's storage and lab/models
MODULE = "configuration_kimi_k25.py"
CANARY = "sglang-pve-canary"
# Writes a canary named for its uid into its HOME (the server's state dir; root's /root; the judge's
# private /tmp, gone when it exits), or /tmp when HOME is not writable.
WRITES = f"""import os
uid = os.getuid()
for folder in (os.environ.get("HOME") or "/tmp", "/tmp"):
    try:
        with open(os.path.join(folder, "{CANARY}.%d" % uid), "a") as f:
            f.write("uid=%d pid=%d\\n" % (uid, os.getpid()))
        break
    except OSError:
        pass
class KimiK25Config:
    model_type = "kimi_k25"
"""
# Says who ran it through SGLang's verdict (a config SGLang refuses names the exception).
REFUSES = 'import os\nraise RuntimeError("sglang-pve canary ran as uid %d" % os.getuid())\n'
FIND = f"find / -xdev -name '{CANARY}.*' -printf '%U %p\\n' 2>/dev/null; true"
DELETE = f"find / -xdev -name '{CANARY}.*' -delete 2>/dev/null; true"


@pytest.fixture(scope="module")
def planted(lab):
    pyinfra()  # converged: the baseline server runs
    target = layout.STORAGE_DIR.joinpath(*MODEL, MODULE)
    shipped = layout.MODELS_SOURCE_DIR.joinpath(*MODEL, MODULE).read_text()

    def plant(text: str) -> None:
        target.write_text(text)
        sh(f"rm -f /etc/sglang/servers/baseline.yaml; {DELETE}")

    yield plant
    target.write_text(shipped)
    sh(DELETE)
    restore_servers()


def server_uid() -> int:
    pid = sh(f"systemctl show -p MainPID --value {paths.unit_name('baseline')}").strip()
    assert pid != "0", "baseline is not running"
    return int(sh(f"stat -c %u /proc/{pid}"))


def canaries() -> list[tuple[int, str]]:
    return [(int(uid), path) for uid, path in (line.split(" ", 1) for line in sh(FIND).splitlines())]


def test_dry_preflight_runs_the_model_code_as_the_servers_user(planted):
    uid = server_uid()
    planted(REFUSES)  # and baseline's host copy removed: its rendered config differs, so SGLang judges it
    code, output = pyinfra("--dry", yes=False, check=False)
    ran_as = re.findall(r"sglang-pve canary ran as uid (\d+)", output)
    assert code != 0 and ran_as, output  # the judge did load it: the verdict names the exception
    assert {int(u) for u in ran_as} == {uid} != {0}  # the server's (dynamic) uid, never root
    assert canaries() == []


def test_a_deploy_leaves_no_root_owned_canary_and_the_server_ran_the_code(planted):
    planted(WRITES)
    pyinfra()  # judges baseline (its host copy is gone) in the judge's private /tmp, rewrites it
    sh(f"systemctl restart {paths.unit_name('baseline')}")  # the server loads the module at start
    uid = server_uid()
    found = canaries()
    assert found and {owner for owner, _ in found} == {uid} != {0}, found
    assert all(path.endswith(f"{CANARY}.{uid}") and "/var/lib/" in path for _, path in found), found


def environ(pid: int) -> dict[str, str]:
    raw = sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


def test_the_root_steps_see_none_of_the_servers_environment(planted, tmp_path):
    preload = sh("readlink -f /lib/*/libm.so.6 /usr/lib/*/libm.so.6 2>/dev/null | head -1").strip()
    servers = yaml.safe_load((PROJECT / "group_data" / "servers.yml").read_text())
    own = {"LD_PRELOAD": preload, "SGLANG_ROOT_STEP_CANARY": "server-only"}
    servers["servers"]["baseline"] = {"env": own, "allow_env": ["LD_PRELOAD"]}
    (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
    pyinfra("--data", f"servers_file={tmp_path / 'servers.yml'}")  # restarts baseline with its new env
    unit = paths.unit_name("baseline")
    main = int(sh(f"systemctl show -p MainPID --value {unit}"))
    server = environ(main)
    home = paths.server_home_env()
    assert {k: server.get(k) for k in (*own, *home)} == own | home  # the server has all of it
    # the gate's watchdog: started by ExecStartPost=+ as root, with the environment that step got
    root_steps = [pid for pid in unit_cgroup_pids(unit) if sh(f"stat -c %u /proc/{pid}").strip() == "0"]
    assert any("watchdog" in sh(f"tr '\\0' ' ' < /proc/{pid}/cmdline") for pid in root_steps), root_steps
    for pid in root_steps:
        seen = environ(pid)
        assert not set(seen) & (set(own) | set(home) - {"HOME"}), seen
        assert seen.get("HOME") != home["HOME"] and seen["SGLANG_PVE_UNIT"] == unit, seen
