"""Nothing read from a model folder runs as root: a configuration_kimi_k25.py planted in the lab's
model folder (config.json's auto_map names it; the servers run with trust-remote-code) is run by
SGLang's parser at preflight and by the server, and the simulator loads it the way transformers
does (lab/sglang_sim/sglang/srt/remote_code.py). The preflight judge runs it as the server's user,
in the server's sandbox (sglang_pve/deploy/sandbox.py), under --dry and in a deploy; root never."""

import re

import pytest

from lab import layout
from sglang_pve.deploy import paths
from tests.lab.conftest import pyinfra, restore_servers, sh

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
