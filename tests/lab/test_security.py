"""Security in the real lab: systemd's own reading of hostile values, planted links, the dotfiles rc."""

import json
import os
import subprocess
import sys

import pytest

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.config.deployment import SGLANG_VERSION
from sglang_pve.deploy import paths
from sglang_pve.deploy.render import server_files
from tests.conftest import PROJECT
from tests.hostile import VALUES, data_for, in_base64, systemd_words
from tests.lab.conftest import (
    GUEST,
    grand_total,
    http_status,
    on_target,
    put_file,
    pyinfra,
    refresh_simulator,
    restore_servers,
    set_faults,
    sh,
)

pytestmark = pytest.mark.lab

PROBE_UNIT = "/etc/systemd/system/sgpve-hostile-probe.service"  # not sglang-*: the deploy never sees it
RUN_UNIT, RUN_VENV = "/etc/systemd/system/sgpve-hostile-run.service", "/run/sgpve-hostile-venv"


def started_environment(deployment, server) -> dict[str, str]:
    """The environment of the process the unit's ExecStart= starts (its venv's python prints it)."""
    put_file(f"{RUN_VENV}/bin/python", "#!/usr/bin/python3\nimport json, os\nprint(json.dumps(dict(os.environ)))\n")
    sh(f"chmod 755 {RUN_VENV}/bin/python")
    unit = server_files(deployment, server, RUN_VENV)[0].content
    kept = [line for line in unit.splitlines() if line.startswith(("Environment=", "ExecStart="))]
    put_file(
        RUN_UNIT, "[Service]\nType=oneshot\nStandardOutput=file:/run/sgpve-hostile-env.json\n" + "\n".join(kept) + "\n"
    )
    sh(f"systemctl daemon-reload && systemctl start {RUN_UNIT.rsplit('/', 1)[1]}")
    environment = json.loads(sh("cat /run/sgpve-hostile-env.json; rm -f /run/sgpve-hostile-env.json"))
    return {k: v for k, v in environment.items() if k not in ("INVOCATION_ID", "SYSTEMD_EXEC_PID", "JOURNAL_STREAM")}


def test_systemd_reads_every_accepted_hostile_value_back_exactly(lab, tmp_path):
    accepted = {}
    for value in VALUES:
        try:
            load_deployment("sglang1", data_for("env value", value, tmp_path), PROJECT)
        except ConfigError:
            continue
        accepted[f"SGLANG_HOSTILE_{len(accepted)}"] = value
    assert len(accepted) >= 25  # quotes, $(...), backticks, ;, %, spaces, backslashes, non-ASCII digits...
    deployment = load_deployment("sglang1", data_for("env value", "x", tmp_path), PROJECT)
    server = deployment.servers["baseline"]
    server = type(server)(server.name, server.args, accepted, server.lifecycle)
    unit = server_files(deployment, server, "/opt/sglang/venvs/x")[0].content
    put_file(PROBE_UNIT, unit)
    plain = type(server)(server.name, server.args, {}, server.lifecycle)
    try:
        sh("systemctl daemon-reload")
        shown = sh(f"systemctl show -p Environment -p Description --value {PROBE_UNIT.rsplit('/', 1)[1]}").splitlines()
        unit_wide = dict(word.split("=", 1) for word in systemd_words(shown[0]))
        assert not set(unit_wide) & set(accepted)  # env: is the server's alone: the root steps never see it
        assert shown[1] == f"SGLang server baseline ({server.args.served_model_name})"
        # what the server process gets: the unit's Environment= and ExecStart= lines, started for real
        # with a "python" that prints its environment
        environment = started_environment(deployment, server)
        assert {name: environment.get(name) for name in accepted} == accepted
        assert set(environment) - set(accepted) == set(started_environment(deployment, plain))  # nothing split/added
    finally:
        sh(f"rm -rf {PROBE_UNIT} {RUN_UNIT} {RUN_VENV}; systemctl daemon-reload")


CANARY = "/root/canary"
USER_DATA = ["--data", "shell_user=dev", "--data", "shell_rc=/home/dev/.zshrc"]


@pytest.fixture
def dev_user(lab):
    sh(
        "id dev >/dev/null 2>&1 || useradd -m -s /usr/bin/zsh dev; rm -rf /home/dev/.zshrc /home/dev/dotfiles; "
        f"printf 'CANARY root-only\\n' > {CANARY}; chmod 600 {CANARY}; "
        f"for n in 1 2 3; do cp -p {CANARY} {CANARY}$n; done"
    )
    yield "dev"
    sh(
        f"rm -f {CANARY} {CANARY}1 {CANARY}2 {CANARY}3 /etc/nccl.conf.sglang-pve-new; "
        "rm -rf /home/dev/.zshrc /home/dev/dotfiles "
        "/home/dev/.zshrc.sglang-pve-new"
    )
    pyinfra(deploy="tasks/nccl_env.py")  # managed files back as the shipped deploy leaves them


def canaries() -> str:
    return sh(f"stat -c '%n %a %U %s %Y' {CANARY} {CANARY}1 {CANARY}2 {CANARY}3; cat {CANARY}*")


def test_a_planted_link_at_the_rc_towards_a_root_file_is_refused_untouched(dev_user):
    sh(f"runuser -u dev -- ln -s {CANARY} /home/dev/.zshrc")
    before = canaries()
    code, output = pyinfra(*USER_DATA, deploy="tasks/nccl_env.py", check=False)
    assert code != 0 and "belongs to root, not dev" in output and "a link to /root/canary" in output, output
    assert "CANARY" not in output  # the root-only file was never read back
    assert canaries() == before and sh("readlink /home/dev/.zshrc").strip() == CANARY


def test_links_at_managed_paths_and_old_temp_names_leave_their_targets_untouched(dev_user):
    # a dotfiles user: the rc is a link into their own repository, mode 600
    sh(
        'runuser -u dev -- sh -c \'mkdir ~/dotfiles && printf "alias ll=ls\\n" > ~/dotfiles/zshrc '
        "&& chmod 600 ~/dotfiles/zshrc "
        "&& ln -s dotfiles/zshrc ~/.zshrc'"
    )
    # links at a managed path and at the temporary names the deploy used to write through
    sh(
        f"ln -sfn {CANARY}1 /etc/nccl.conf; ln -s {CANARY}2 /etc/nccl.conf.sglang-pve-new; "
        f"runuser -u dev -- ln -s {CANARY}3 /home/dev/.zshrc.sglang-pve-new"
    )
    before = canaries()
    pyinfra(*USER_DATA, deploy="tasks/nccl_env.py")
    assert canaries() == before
    assert sh("stat -c '%F %U %a' /etc/nccl.conf").strip() == "regular file root 644"
    assert "NCCL_PROTO=LL" in sh("cat /etc/nccl.conf")
    assert sh("readlink /home/dev/.zshrc").strip() == "dotfiles/zshrc"  # the link survives...
    target = sh("cat /home/dev/dotfiles/zshrc")
    assert (
        target.startswith("alias ll=ls\n") and "# >>> sglang-pve nccl-profile >>>" in target
    )  # ...the block is inside
    assert sh("stat -c '%U %a' /home/dev/dotfiles/zshrc").strip() == "dev 600"
    # zsh itself reads the block back: exactly the profile's values
    assert on_target(
        "runuser", "-u", "dev", "--", "zsh", "-i", "-c", "printenv NCCL_PROTO NCCL_NTHREADS"
    ).stdout.split() == ["LL", "512"]
    assert not sh("ls -A /home/dev/dotfiles /etc | grep -c '^\\.sglang-pve' || true").strip().strip("0")  # no temp left
    _, again = pyinfra(*USER_DATA, deploy="tasks/nccl_env.py")
    assert grand_total(again)["changed"] == 0  # and the next deploy finds it up to date


RC_SECRET = "hf_rcCanary0d5e2b7a41c9"  # a user's own line in their rc: never the controller's business


def test_the_user_s_own_rc_lines_never_reach_the_controller(dev_user):
    """pyinfra prints fact output at -vvv: the block's fact sends back its digest and markers, the
    edit runs on the host, so no byte of the user's other lines (text or base64) is printed."""
    own = f"alias ll=ls\nexport HF_TOKEN={RC_SECRET}\n# no final newline"
    put_file("/home/dev/.zshrc", own)
    sh("chown dev:dev /home/dev/.zshrc && chmod 600 /home/dev/.zshrc")
    _, output = pyinfra(*USER_DATA, "-vvv", "--diff", deploy="tasks/nccl_env.py")
    assert "Will create the nccl-profile block in /home/dev/.zshrc" not in output  # the file was there
    assert "Will modify the nccl-profile block in /home/dev/.zshrc" in output and "+ export NCCL_PROTO=LL" in output
    assert RC_SECRET not in output and not in_base64(RC_SECRET, output) and "alias ll" not in output
    text = sh("cat /home/dev/.zshrc")
    assert text.startswith(own + "\n\n# >>> sglang-pve nccl-profile >>>")  # every byte of the user's kept
    assert text.endswith("# <<< sglang-pve nccl-profile <<<\n") and "export NCCL_PROTO=LL\n" in text
    assert sh("stat -c '%U %a' /home/dev/.zshrc").strip() == "dev 600"


# --- Secrets: canaries through every channel, then 401 without the key and 200 with it ----------

API_KEY, ADMIN_KEY, HF_TOKEN = "canary-api-0c9f3e71", "canary-admin-77ab1d42", "hf_canary5e2d9a08"
CANARIES = (API_KEY, ADMIN_KEY, HF_TOKEN)
SAMPLES = "/root/argv-samples"
SAMPLER = (
    f"rm -f {SAMPLES}.stop; while [ ! -e {SAMPLES}.stop ]; do for f in /proc/[0-9]*/cmdline; do "
    f"tr '\\0' ' ' < $f 2>/dev/null; echo; done; sleep 0.05; done > {SAMPLES}"
)
# Everything a user other than root may read (the dynamic server user reads its own credential only)
READABLE_ROOTS = "/etc /opt /var /tmp /run /home /srv /shared /data /usr/local"


@pytest.fixture(scope="module")
def keyed(lab, tmp_path_factory):
    """A deploy with every secret channel in use (file and environment on the controller); the
    target's process argv sampled all the while; afterwards the lab's own deploy again (its api-key)."""
    key_file = tmp_path_factory.mktemp("secrets") / "api-key"
    key_file.write_text(API_KEY + "\n")
    key_file.chmod(0o600)
    secrets = {
        "api-key": {"file": str(key_file)},
        "admin-api-key": {"env": "SGLANG_PVE_TEST_ADMIN_KEY"},
        "env": {"HF_TOKEN": {"env": "SGLANG_PVE_TEST_HF_TOKEN"}},
    }
    os.environ.update(SGLANG_PVE_TEST_ADMIN_KEY=ADMIN_KEY, SGLANG_PVE_TEST_HF_TOKEN=HF_TOKEN)
    refresh_simulator()  # the venv's simulator must know --admin-api-key
    sh(f"rm -rf {paths.SECRETS_DIR}")  # so that the dry run has secret files to announce
    sampler = subprocess.Popen(
        [sys.executable, "-m", "lab", "exec", GUEST, "--", "sh", "-c", SAMPLER],
        cwd=PROJECT,
        stderr=subprocess.DEVNULL,
    )
    try:
        data = ["--data", f"sglang_secrets={json.dumps(secrets)}"]
        _, diff = pyinfra("--dry", "--diff", *data, yes=False)
        _, verbose = pyinfra("-vv", "--diff", *data)
        _, again = pyinfra(*data)
    finally:
        sh(f"touch {SAMPLES}.stop")
        sampler.wait(timeout=30)
    yield {"dry diff": diff, "-vv --diff": verbose, "second run": again, "data": data}
    del os.environ["SGLANG_PVE_TEST_ADMIN_KEY"], os.environ["SGLANG_PVE_TEST_HF_TOKEN"]
    sh(f"rm -rf {paths.SECRETS_DIR} {SAMPLES} {SAMPLES}.stop")
    restore_servers()  # the lab's own deploy, with the api-key `lab up` made


def test_the_server_answers_401_without_the_key_and_200_with_it(keyed):
    assert sh(f"systemctl is-active {paths.unit_name('baseline')}").strip() == "active"  # the gate passed with a key
    assert http_status("/v1/models") == 401 and http_status("/v1/models", "wrong") == 401
    assert http_status("/v1/models", API_KEY) == 200
    assert http_status("/flush_cache", API_KEY) == 401 and http_status("/flush_cache", ADMIN_KEY) == 200  # admin key
    assert http_status("/health") == 200 and http_status("/health_generate") == 200  # probes need no key
    status = json.loads(on_target("python3", "-I", paths.AGENT, "status", "--json").stdout)
    assert next(s for s in status["servers"] if s["server"] == "baseline")["health"]["status"] == 200


def test_the_server_gets_its_secrets(keyed):
    pid = sh(f"systemctl show -p MainPID --value {paths.unit_name('baseline')}").strip()
    environ = sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert f"HF_TOKEN={HF_TOKEN}" in environ.splitlines()
    assert API_KEY not in sh(f"tr '\\0' ' ' < /proc/{pid}/cmdline")


def test_no_canary_in_output_argv_journal_units_or_anything_a_user_can_read(keyed):
    for name, output in keyed.items():
        if name != "data":
            assert not [c for c in CANARIES if c in output], f"a secret in the {name} output"
    assert "holds secrets: content not shown" in keyed["dry diff"]  # --diff says it changes, not how
    samples = sh(f"wc -l < {SAMPLES}; grep -c sglang {SAMPLES} || true").split()
    assert int(samples[0]) > 1000 and int(samples[1]) > 0  # the sampler really watched the deploy
    leaks = sh(
        f"grep -l -e {API_KEY} -e {ADMIN_KEY} -e {HF_TOKEN} {SAMPLES} /etc/systemd/system/* 2>/dev/null; "
        f"journalctl --no-pager -o cat | grep -c -e {API_KEY} -e {ADMIN_KEY} -e {HF_TOKEN}; "
        f"runuser -u nobody -- grep -rIl -e {API_KEY} -e {ADMIN_KEY} -e {HF_TOKEN} {READABLE_ROOTS} 2>/dev/null",
        check=False,
    )
    assert leaks.split() == ["0"], leaks  # no argv sample, unit file, journal line or user-readable file
    # where they are: root-only files, and SGLang's own log (its server_args), root-only too
    assert sh(
        f"stat -c '%a %U' {paths.secret_config_path('baseline')} {paths.secret_env_path('baseline')} {paths.LOG_DIR}"
    ).split() == ["600", "root", "600", "root", "700", "root"]
    assert API_KEY in sh(f"grep -h server_args {paths.log_path('baseline')} | tail -1")


API_KEY2, INDEX_TOKEN = "canary-api2-4f0e6b19", "canary-index-b7d2c530"


def _canaries() -> tuple[str, ...]:
    """Every secret of the rollback run: the keys of both releases, the HF token, the index login's
    password and the node's API password (root@pam, used by deploy.py's node tasks)."""
    from lab import layout

    password = json.loads(layout.PVE_CREDENTIALS.read_text())["users"]["root@pam"]["password"]
    return (*CANARIES, API_KEY2, INDEX_TOKEN, password)


def _leaks(text: str) -> list[int]:
    """Which canaries (by index, never by value) `text` holds, as text or base64-encoded (at any
    alignment: a line inside a file sent back whole)."""
    return [i for i, c in enumerate(_canaries()) if c in text or in_base64(c, text)]


def _quiet(*args: str, deploy: str = "deploy.py", ok: bool = True) -> str:
    """pyinfra's output; a failure shows it with every canary replaced (never printed)."""
    code, output = pyinfra(*args, deploy=deploy, check=False)
    if ok and code != 0:
        for i, canary in enumerate(_canaries()):
            output = output.replace(canary, f"<canary {i}>")
        raise AssertionError(f"pyinfra {deploy} exited {code}:\n{output[-6000:]}")
    return output


@pytest.fixture(scope="module")
def rolled_back(keyed, tmp_path_factory):
    """After `keyed`'s release (A): a deploy -vvv --diff of release B (another api-key), the index
    login from its secret source (sglang_version nightly-<day>: the controller reads the lab's
    index with it, resolving to the pinned build, so no venv is built), then a rollback to A with
    -vvv --diff, the agent's Releases payload as the fact asks for it, a refused URL with the
    login in it and debug-inventory: every output the canaries could reach."""
    from lab import layout

    key_file = tmp_path_factory.mktemp("secrets-b") / "api-key"
    key_file.write_text(API_KEY2 + "\n")
    key_file.chmod(0o600)
    secrets = json.loads(keyed["data"][1].split("=", 1)[1]) | {"api-key": {"file": str(key_file)}}
    day = SGLANG_VERSION.split(".dev", 1)[1][:8]  # the lab's build: nightly-<its day> resolves to it
    login = {layout.BRIDGE_ADDRESS: {"login": "lab", "password": {"env": "SGLANG_PVE_TEST_INDEX_TOKEN"}}}
    index = ["--data", f"sglang_index_credentials={json.dumps(login)}", "--data", f"sglang_version=nightly-{day}"]
    os.environ["SGLANG_PVE_TEST_INDEX_TOKEN"] = INDEX_TOKEN
    try:
        outputs = {
            "deploy B -vvv --diff": _quiet("-vvv", "--diff", "--data", f"sglang_secrets={json.dumps(secrets)}", *index)
        }
        b_runs = http_status("/v1/models", API_KEY2)
        outputs["rollback -vvv --diff"] = _quiet("-vvv", "--diff", *keyed["data"], *index, deploy="tasks/rollback.py")
        outputs["releases fact"] = on_target(
            "python3", "-I", paths.AGENT, "releases", "--dir", paths.RELEASES_DIR, "--files-of", "previous"
        ).stdout
        bad_url = f"http://lab:{INDEX_TOKEN}@{layout.BRIDGE_ADDRESS}:{layout.INDEX_PORT}/simple/"
        outputs["refused URL"] = _quiet("--limit", "sglang1", "--data", f"sglang_index_url={bad_url}", ok=False)
        outputs["debug-inventory"] = _quiet(*index, deploy="debug-inventory")
    finally:
        del os.environ["SGLANG_PVE_TEST_INDEX_TOKEN"]

    yield {"outputs": outputs, "b ran": b_runs}


def test_a_rollback_says_a_secret_changed_and_no_channel_carries_one(rolled_back):
    outputs = rolled_back["outputs"]
    assert rolled_back["b ran"] == 200 and http_status("/v1/models", API_KEY) == 200  # A's key again...
    assert http_status("/v1/models", API_KEY2) == 401  # ...restored on the host, byte for byte
    hidden = f"Will replace {paths.secret_config_path('baseline')} (holds secrets: content not shown)"
    assert hidden in outputs["deploy B -vvv --diff"] and hidden in outputs["rollback -vvv --diff"]
    assert '"secret_sha1"' in outputs["rollback -vvv --diff"]  # -vvv printed the Releases fact's payload
    assert "sglang_version nightly-" in outputs["deploy B -vvv --diff"]  # the index was read with the login
    report = json.loads(outputs["releases fact"])
    assert paths.secret_config_path("baseline") in report["secret_sha1"]  # its digest...
    assert report["contents"] and paths.secret_config_path("baseline") not in report["contents"]  # ...not its content
    assert "holds credentials (user:password@)" in outputs["refused URL"] and "***@" in outputs["refused URL"]
    assert "sglang_index_credentials" in outputs["debug-inventory"]  # the data is there, by name
    for name, output in outputs.items():
        assert _leaks(output) == [], f"canaries {_leaks(output)} in the {name} output"


def test_the_benchmark_authenticates_with_the_key_it_reads_on_the_target(keyed, tmp_path):
    _, output = pyinfra(
        *keyed["data"],
        "--data",
        "configs=baseline",
        "--data",
        "num_prompts=2",
        "--data",
        "output_len=16",
        "--data",
        "warmup=0",
        "--data",
        f"bench_results_dir={tmp_path}",
        deploy="tasks/bench.py",
    )
    (record,) = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["single_stream"]["completed"] == 2, record["diagnosis"]  # not 401
    assert not [c for c in CANARIES if c in output + (tmp_path / "history.jsonl").read_text()]
    assert sh(f"systemctl is-active {paths.unit_name('baseline')}").strip() == "active"  # running again


def test_status_and_diagnoses_hide_the_key_that_the_log_holds(keyed):
    # a start that stalls: the gate's diagnosis carries the log's tail, SGLang's server_args line included
    sh(f"rm -f {paths.DIAGNOSES_DIR}/baseline-*.json")
    set_faults({"baseline": {"hang": "weights"}})
    try:
        sh(f"systemctl restart {paths.unit_name('baseline')}", check=False)  # fails: stalled in weights
        diagnosis = sh(f"cat {paths.DIAGNOSES_DIR}/baseline-*.json")
        status = sh(f"python3 -I {paths.AGENT} status --json")
        _, table = pyinfra(deploy="tasks/status.py")
    finally:
        restore_servers()
    assert "api_key='<hidden>'" in diagnosis and "admin_api_key='<hidden>'" in diagnosis  # the line was there...
    assert not [c for c in CANARIES if c in diagnosis + status + table]  # ...its keys were not
    from sglang_pve.agent import logfollow

    assert (
        logfollow.redact(f"server_args=ServerArgs(api_key='{API_KEY}', port=8000)")
        == "server_args=ServerArgs(api_key='<hidden>', port=8000)"
    )
    assert (
        logfollow.redact(f"error: unrecognized arguments: --admin-api-key {ADMIN_KEY}")
        == "error: unrecognized arguments: --admin-api-key <hidden>"
    )


def test_a_bad_secret_is_refused_without_echoing_it(keyed, tmp_path):
    bad = tmp_path / "bad-key"
    bad.write_text("canary with spaces $(id)\n")
    bad.chmod(0o600)
    code, output = pyinfra("--data", f"sglang_secrets={json.dumps({'api-key': {'file': str(bad)}})}", check=False)
    assert code != 0 and "sglang_secrets.api-key" in output and "canary with spaces" not in output


# --- SSH: a changed host key on the jump host is refused -----------------------------------------


def _through_jump(tmp_path, jump_known_hosts: str) -> tuple[int, str]:
    """`pyinfra ... exec -- true` to sglang1 through the node pve1 as jump host, whose key is checked
    against `jump_known_hosts` the way inventory/ssh_config.example does (alias and address)."""
    from lab import layout

    (tmp_path / "jump_known_hosts").write_text(jump_known_hosts)
    (tmp_path / "ssh_config").write_text(
        f"Host jump {layout.NODE_ADDRESS}\n    HostName {layout.NODE_ADDRESS}\n    User root\n"
        f"    IdentityFile {layout.SSH_KEY}\n"
        f"    UserKnownHostsFile {tmp_path / 'jump_known_hosts'}\n    StrictHostKeyChecking yes\n\n"
        f"Host behind-jump\n    HostName {layout.SGLANG_HOSTS['sglang1']}\n    ProxyJump jump\n    ConnectTimeout 10\n"
    )
    (tmp_path / "inventory.py").write_text(
        f"hosts = [('behind-jump', {{'ssh_user': 'root', 'ssh_key': {str(layout.SSH_KEY)!r}, "
        f"'ssh_config_file': {str(tmp_path / 'ssh_config')!r}, 'ssh_known_hosts_file': {str(layout.KNOWN_HOSTS)!r}, "
        "'ssh_strict_host_key_checking': 'yes'})]\n"
    )
    result = subprocess.run(
        [str(PROJECT / ".venv" / "bin" / "pyinfra"), "-y", str(tmp_path / "inventory.py"), "exec", "--", "true"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return result.returncode, result.stdout + result.stderr


def test_a_changed_host_key_on_the_jump_host_is_refused(lab, tmp_path):
    from lab import layout

    address = layout.NODE_ADDRESS
    pinned = [line for line in layout.KNOWN_HOSTS.read_text().splitlines() if line.split()[0] in (address, layout.NODE)]
    code, output = _through_jump(tmp_path, "".join(f"{address} {line.split(' ', 1)[1]}\n" for line in pinned))
    assert code == 0, output  # the right key on both hops: connected
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")], check=True)
    impostor = " ".join((tmp_path / "impostor.pub").read_text().split()[:2])
    code, output = _through_jump(tmp_path, f"{address} {impostor}\n")  # the jump host's key "changed"
    assert code != 0 and "[behind-jump] Connected" not in output, output
    # paramiko refuses the jump hop (pyinfra 3.x then trips over its own error path, still exit 1)
    assert f"Host key for server '{address}' does not match" in output, output


def test_preflight_refuses_an_open_bind_without_a_key_before_any_change(lab):
    before = sh(f"stat -c '%Y' {paths.unit_path('baseline')}")
    code, output = pyinfra("--data", "sglang_secrets={}", deploy="tasks/preflight.py", check=False)
    assert code != 0 and "binds beyond the loopback without an API key" in output and "nothing was changed" in output, (
        output
    )
    assert sh(f"stat -c '%Y' {paths.unit_path('baseline')}") == before
    # allow_unauthenticated stays the explicit way to an open server: accepted, with a warning
    code, output = pyinfra(
        "--data", "sglang_secrets={}", "--data", "allow_unauthenticated=true", deploy="tasks/preflight.py", check=False
    )
    assert code == 0 and "without an API key" in output, output
