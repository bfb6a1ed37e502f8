"""Reliability of the deploy and the units against the real lab (issue 8): an operator's own
sglang-router.service survives every deploy; a deploy killed anywhere converges on the next run
with no half file; a requested stop ends the unit inactive with no process left; a crash after
ready is started again up to the cap, then fails with the reason (issue 15); a manual switch
under load drains the first configuration and starts the second.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from sglang_pve.deploy import paths
from tests.conftest import PROJECT, group_data
from tests.lab.conftest import (
    ANSI,
    GUEST,
    PYINFRA,
    STARTING,
    grand_total,
    lab_api_key,
    lock_held_by_another_run,
    on_target,
    pyinfra,
    server_status,
    set_faults,
    sh,
    snapshot,
    unit_state,
)

pytestmark = pytest.mark.lab

PROFILES = ("pcie-tuned", "p2p-disabled")
ROUTER = "/etc/systemd/system/sglang-router.service"
ROUTER_UNIT = """[Unit]
Description=An operator's own router, not made by sglang-pve

[Service]
ExecStart=/bin/sleep infinity
"""
ROUTER_CONFIG = "/etc/sglang/servers/router.yaml"
LOAD = r"""
import json, sys, threading, urllib.request
key = sys.stdin.readline().strip()  # the lab's api-key, on stdin (never in a command line)
codes = []
def request():
    sampling = {"max_new_tokens": int(sys.argv[1])}
    body = json.dumps({"text": "The capital city of France is", "sampling_params": sampling}).encode()
    try:
        sent = urllib.request.Request("http://127.0.0.1:8000/generate", body, {"Authorization": "Bearer " + key})
        codes.append(urllib.request.urlopen(sent, timeout=120).status)
    except Exception as error:
        codes.append(repr(error))
threads = [threading.Thread(target=request) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(codes))
"""


@pytest.fixture(scope="module")
def deployed(lab):
    pyinfra()
    yield lab
    pyinfra()


@pytest.fixture
def redeployed(deployed):
    """For a test that leaves the server failed on purpose: deployed again afterwards, pass or fail,
    so the next test of this module starts from a running server."""
    yield deployed
    pyinfra()


def sha1(path: str) -> str:
    return sh(f"sha1sum < {path} | cut -d' ' -f1").strip()


def main_env(server: str, name: str) -> str | None:
    pid = sh(f"systemctl show -p MainPID --value {paths.unit_name(server)}").strip()
    raw = sh(f"tr '\\0' '\\n' < /proc/{pid}/environ", check=False)
    return next((line.split("=", 1)[1] for line in raw.splitlines() if line.startswith(name + "=")), None)


def profile_value(profile: str) -> str:
    return str(group_data("all")["nccl_profiles"][profile].get("NCCL_P2P_DISABLE", ""))


def test_an_operators_router_unit_and_its_files_survive_every_deploy(deployed):
    sh(
        f"cat > {ROUTER} <<'EOF'\n{ROUTER_UNIT}EOF\nprintf 'router: mine\\n' > {ROUTER_CONFIG}; "
        "systemctl daemon-reload; systemctl start sglang-router.service"
    )
    before = (sha1(ROUTER), sha1(ROUTER_CONFIG))
    try:
        for data in ((), ("--data", "active_server=eagle3-2step"), ()):
            _, output = pyinfra(*data)
            assert "left alone, not managed by sglang-pve (no marker): sglang-router.service" in output
            assert (sha1(ROUTER), sha1(ROUTER_CONFIG)) == before
            assert unit_state("sglang-router.service")["ActiveState"] == "active"
    finally:
        sh(f"systemctl stop sglang-router.service; rm -f {ROUTER} {ROUTER_CONFIG}; systemctl daemon-reload")


def test_every_ssh_connection_and_its_jump_host_is_kept_alive(deployed):
    """The node's connection, the guest's and the guest's ProxyJump hop through the node each send a
    keepalive every ssh_keepalive_s (default 30 s: sglang_pve/provision/keepalive.py)."""
    _, output = pyinfra(deploy="tests/lab/keepalive_probe.py")
    assert "keepalive pve1 NodeConnector [30]" in output, output
    assert "keepalive sglang1 GuestConnector [30, 30]" in output, output


def deploy_killed_after(seconds: float, profile: str) -> None:
    """Start a deploy and SIGKILL it (our own child, by its PID) after `seconds`."""
    child = subprocess.Popen(
        [PYINFRA, "-y", "inventory/lab.py", "deploy.py", "--data", f"nccl_profile={profile}"],
        cwd=PROJECT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def test_a_deploy_killed_anywhere_converges_on_the_next_run(deployed):
    """Killed at four points spread over a deploy that changes the NCCL profile (which changes the
    running server's unit, so it must restart): every managed file is whole (old or new, never a
    prefix), and the next run leaves the server running with the new profile (a switch killed
    midway leaves its release pending, so the rerun switches again: agent/release_store.py).

    The points, as fractions of a whole such deploy timed here: 10% while pyinfra loads and
    connects (nothing written), 25% among the file writes (NCCL environment, units), 55% and 85%
    inside the switch (the release operation, ~60% of the deploy: stop, GPUs free, start, gate),
    early and late. Measured on a loaded lab (load ~30, 45 s deploy): loading 0-18%, writes
    18-31%, switch 31-91%; 40% and 70%, two more points inside the switch, were dropped (each
    cost a killed deploy and a whole rerun)."""
    texts = {}
    pyinfra("--data", f"nccl_profile={PROFILES[0]}")
    texts[PROFILES[0]] = {path: sha1(path) for path in (paths.NCCL_ENV, paths.unit_path("baseline"))}
    started = time.monotonic()
    pyinfra("--data", f"nccl_profile={PROFILES[1]}")  # a whole deploy that changes the profile, timed
    full_s = time.monotonic() - started
    texts[PROFILES[1]] = {path: sha1(path) for path in (paths.NCCL_ENV, paths.unit_path("baseline"))}
    for index, fraction in enumerate((0.1, 0.25, 0.55, 0.85)):
        target = PROFILES[index % 2]
        deploy_killed_after(full_s * fraction, target)
        for path in (paths.NCCL_ENV, paths.unit_path("baseline")):
            assert sha1(path) in {texts[p][path] for p in PROFILES}, f"half file {path} after a kill at {fraction:.0%}"
        pyinfra("--data", f"nccl_profile={target}")
        assert unit_state(paths.unit_name("baseline"))["ActiveState"] == "active"
        assert sh("systemctl show -p NeedDaemonReload --value sglang-baseline.service").strip() == "no"
        assert main_env("baseline", "NCCL_P2P_DISABLE") == (profile_value(target) or None), (
            f"the server kept the old profile after a rerun following a kill at {fraction:.0%}"
        )


def _deploy(*data: str) -> subprocess.Popen:
    return subprocess.Popen(
        [PYINFRA, "-y", "inventory/lab.py", "deploy.py", *data],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


class _Lines:
    """A child's output read on a thread as it comes, for a test that waits for one of its lines."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.lines = process, []
        self.reader = threading.Thread(target=lambda: self.lines.extend(process.stdout), daemon=True)
        self.reader.start()

    def text(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float) -> str:
        self.process.wait(timeout=timeout)
        self.reader.join(timeout=60)
        return self.text()


def _until(condition, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_two_deploys_started_together_run_one_after_the_other(deployed):
    """Two deploys with different NCCL profiles at once: the second waits for the first's deploy
    lock (naming it), then deploys its own profile whole; the current release names the profile
    the running server's environment holds. With wait_lock=0 a third refuses at once."""
    from sglang_pve.deploy.provenance import who

    pyinfra("--data", f"nccl_profile={PROFILES[0]}")
    set_faults({"baseline": {"phase_seconds": {"weights": 12}}})  # the first's switch takes a while
    try:
        first = _deploy("--data", f"nccl_profile={PROFILES[1]}")
        _until(lambda: sh(f"cat {paths.RELEASES_DIR}/pending", check=False).strip() != "")  # inside its switch
        # The first run holds its lock until its last operation: paused (our own child, by its PID;
        # its SSH connections stay open), it holds it for as long as the second takes to reach its own
        # lock, however loaded the machine (before: the first's 12 s weights had to outlast the
        # second's pyinfra start-up). Its switch goes on on the host meanwhile.
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = _deploy("--data", f"nccl_profile={PROFILES[0]}")
            second_lines = _Lines(second)
            waiting = "for the deploy lock, held by"  # or ended: the asserts below say how
            _until(lambda: waiting in second_lines.text() or second.poll() is not None, 600)
            refused = pyinfra("--data", f"nccl_profile={PROFILES[0]}", "--data", "wait_lock=0", check=False)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        outputs = [ANSI.sub("", first.communicate(timeout=600)[0]), ANSI.sub("", second_lines.wait(600))]
        assert (first.returncode, second.returncode) == (0, 0), outputs
    finally:
        set_faults({})
    assert f"waiting up to 3600s for the deploy lock, held by {who()} (deploy) since " in outputs[1]
    assert refused[0] != 0 and "not waiting (wait_lock=0)" in refused[1] and f"held by {who()} (deploy)" in refused[1]
    report = json.loads(sh(f"python3 {paths.AGENT} releases --dir {paths.RELEASES_DIR}"))
    current = next(r for r in report["releases"] if r["id"] == report["current"])
    assert current["nccl_profile"] == PROFILES[0] and report["pending"] is None and report["lease"] is None
    assert main_env("baseline", "NCCL_P2P_DISABLE") == (profile_value(PROFILES[0]) or None)
    assert sh(f"cat {paths.NCCL_ENV}") == sh(
        f"cat {paths.RELEASES_DIR}/blobs/{current['files'][paths.NCCL_ENV]['sha256']}"
    )


def test_a_run_whose_container_another_run_took_the_lock_of_since_its_read_refuses_its_first_change(deployed):
    """A converging run reads the container at the deploy lock's count and takes the lock only at
    its first change, that count expected (deploy/operations/lock.py). Another run that took the
    lock and gave it back in between (here: while the first waits at pyinfra's confirmation
    prompt, after its reads) makes that first change refuse: nothing of the run is written, it says
    why, and the rerun deploys."""
    pyinfra("--data", f"nccl_profile={PROFILES[0]}")
    run = subprocess.Popen(
        [PYINFRA, "inventory/lab.py", "deploy.py", "--data", f"nccl_profile={PROFILES[1]}"],
        cwd=PROJECT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = _Lines(run)
    try:
        _until(lambda: "Detected changes" in lines.text() or run.poll() is not None, 600)  # read, not yet run
        with lock_held_by_another_run():
            pass  # taken and given back: the count moved on by two
        before = snapshot()
        run.stdin.write("\n")  # pyinfra's "Press enter to execute..."
        run.stdin.close()
        output = ANSI.sub("", lines.wait(600))
    finally:
        run.kill()
    assert run.returncode != 0 and "was taken since this run read the container" in output, output
    assert "Fix: run it again" in output and snapshot() == before  # not even a lease written
    _, output = pyinfra("--data", f"nccl_profile={PROFILES[1]}")
    assert grand_total(output)["changed"] > 0 and main_env("baseline", "NCCL_P2P_DISABLE") == (
        profile_value(PROFILES[1]) or None
    )


def test_a_controller_killed_during_the_gate_wait_then_a_rerun_starts_the_server_once(deployed):
    """The controller dies while its switch waits for the gate (a dropped laptop, a killed run): the
    switch goes on on the host in its own unit, its deploy lock is let go only once it ended, and
    the rerun waits for it and adopts that outcome: the server started once, it is ready, and there
    is one new release."""
    pyinfra("--data", f"nccl_profile={PROFILES[0]}")
    before = json.loads(sh(f"python3 {paths.AGENT} releases --dir {paths.RELEASES_DIR}"))
    offset = int(sh(f"stat -c %s {paths.log_path('baseline')}").strip())
    set_faults({"baseline": {"phase_seconds": {"weights": 8}}})
    try:
        first = _deploy("--data", f"nccl_profile={PROFILES[1]}")
        # the new server is loading its weights (8 s): the gate waits. The event itself, not a
        # fixed sleep after the switch began (a loaded guest may not have started the server yet)
        new_lines = f"tail -c +{offset + 1} {paths.log_path('baseline')}"
        _until(lambda: "Load weight begin." in sh(new_lines, check=False))
        first.kill()  # our own child, by its PID: its SSH connections close
        first.wait()
        _, output = pyinfra("--data", f"nccl_profile={PROFILES[1]}")
    finally:
        set_faults({})
    report = json.loads(sh(f"python3 {paths.AGENT} releases --dir {paths.RELEASES_DIR}"))
    current = next(r for r in report["releases"] if r["id"] == report["current"])
    assert current["nccl_profile"] == PROFILES[1] and current["status"] == "ready" and report["pending"] is None
    new = [r["id"] for r in report["releases"] if r["id"] not in {b["id"] for b in before["releases"]}]
    assert new == [current["id"]], output  # a single release (retention may have pruned an old one)
    assert main_env("baseline", "NCCL_P2P_DISABLE") == (profile_value(PROFILES[1]) or None)
    log = sh(f"tail -c +{offset + 1} {paths.log_path('baseline')}")
    assert log.count("GPUs free; starting sglang-baseline.service") == 1, log  # started once
    assert grand_total(output)["changed"] == 0, output
    # the switch ran in its own unit (agent/detached.py), not in the killed run's SSH session
    assert report["switch"]["unit"].startswith("sglang-pve-switch-") and report["switch"]["code"] == 0
    assert report["switch"]["current"] == current["id"] and report["switch"]["seen"] is True  # the rerun saw it
    assert f"adopted: the apply of run {report['switch']['lease']}, whose controller went away" in output, output


def test_a_slow_start_prints_progress_lines_while_the_switch_waits(deployed):
    """A switch whose start takes a while (the simulator's weights phase, 20 s) logs progress lines
    without -v while the gate waits (deploy/progress.py: every INTERVAL_S, read over a second command
    on the same SSH connection): the server, its phase and seconds, plain text in a pipe. Measured
    alone: 56 s (one deploy whose switch waits 20 s for the weights)."""
    from sglang_pve.deploy import progress

    report = json.loads(sh(f"python3 {paths.AGENT} releases --dir {paths.RELEASES_DIR}"))
    now = next(r["nccl_profile"] for r in report["releases"] if r["id"] == report["current"])
    other = PROFILES[1] if now == PROFILES[0] else PROFILES[0]  # a switch, with no deploy before it
    set_faults({"baseline": {"phase_seconds": {"weights": progress.INTERVAL_S + 5}}})
    try:
        deploy = _deploy("--data", f"nccl_profile={other}")
        output = deploy.communicate(timeout=600)[0]  # raw: a pipe, so no control codes of ours
    finally:
        set_faults({})
    assert deploy.returncode == 0, output
    lines = [line for line in output.splitlines() if "progress: " in line]
    # the phase a line names is the one the server is in when it is read: weights for most lines,
    # an earlier one on a loaded guest that reached weights late (INTERVAL_S is 15 s, weights 20 s)
    assert any(re.search(rf"progress: baseline ({STARTING}) \d+ s, starting \(\1, ", line) for line in lines), output
    assert all("\x1b" not in line and "\r" not in line for line in lines), lines


def test_a_requested_stop_ends_inactive(deployed):
    unit = paths.unit_name("baseline")
    sh(f"systemctl stop {unit}")
    state = unit_state(unit)
    assert (state["ActiveState"], state["Result"]) == ("inactive", "success"), state
    leftovers = sh(
        "for p in /proc/[0-9]*; do grep -qz SGLANG_PVE_UNIT= $p/environ 2>/dev/null && echo ${p#/proc/}; done",
        check=False,
    )
    assert leftovers.strip() == ""
    pyinfra()


def _main_pid(unit: str) -> str:
    return sh(f"systemctl show -p MainPID --value {unit}").strip()


def test_a_crash_after_ready_is_restarted_until_the_cap_then_fails_with_the_reason(redeployed):
    """SIGKILL to the server's main process after ready (as an NCCL abort or SGLang's own watchdog
    exit ends it): the unit fails, its crash-restart timer starts it after the backoff, ready
    again, counted in status; the third crash within the window meets the lab's cap (max_restarts
    2) and the unit stays failed, saying why, with no timer left to start it."""
    unit, timer = paths.unit_name("baseline"), "sglang-baseline.crash-restart.timer"
    sh(f"rm -f {paths.STATE_DIR}/restarts/baseline.json {paths.DIAGNOSES_DIR}/baseline-*.json")  # this test's only
    for number in (1, 2):
        pid = _main_pid(unit)
        sh(f"kill -KILL {pid}")  # the server's main process dies by itself, as SGLang's own crash path ends
        _until(lambda pid=pid: _main_pid(unit) not in ("0", pid) and server_status("baseline")["verdict"] == "ready")
        entry = server_status("baseline")
        assert (entry["restarts"]["in_window"], entry["restarts"]["max"]) == (number, 2), entry
    assert unit_state(unit)["NRestarts"] == "0"  # not systemd's Restart=: the agent's timer started it
    crashes = sh(f"ls {paths.DIAGNOSES_DIR} | grep -c '^baseline-.*-crash.json$'").strip()
    assert crashes == "2", crashes  # each crash's diagnosis kept

    sh(f"kill -KILL {_main_pid(unit)}")
    _until(lambda: server_status("baseline")["verdict"].startswith("failed: "))
    assert unit_state(unit)["ActiveState"] == "failed"
    assert sh(f"systemctl is-active {timer}", check=False).strip() in ("inactive", "failed")  # no start comes
    verdict = server_status("baseline")["verdict"]
    assert verdict.startswith("failed: crashed after ready: the main process ended by itself") and verdict.endswith(
        "not restarted: restart cap reached (2 restarts within 600s)"
    ), verdict
    _, table = pyinfra(deploy="tasks/status.py")
    row = next(line for line in table.splitlines() if line.strip().startswith("baseline "))
    assert " 2/2 " in row and " restart " in row and "not restarted: restart cap reached" in row, row


def test_a_manual_switch_under_load_drains_the_first_and_starts_the_second(deployed):
    """Requests in flight on the first configuration when `systemctl start` of the second comes:
    they complete (the drain), the first ends inactive, then the second starts and is ready."""
    first, second = paths.unit_name("baseline"), paths.unit_name("eagle3-2step")
    assert server_status("baseline")["verdict"] == "ready"  # a server to drain, not one a test before left failed
    log_size = int(sh(f"stat -c %s {paths.log_path('baseline')}").strip())
    load = subprocess.Popen(
        [sys.executable, "-m", "lab", "exec", GUEST, "--", "python3", "-c", LOAD, "400"],
        cwd=PROJECT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    load.stdin.write(lab_api_key() + "\n")
    load.stdin.close()
    load.stdin = None  # written and closed: communicate() below only reads
    try:  # every request in flight before the switch (the client starts late under load: no fixed sleep)
        new_lines = f"tail -c +{log_size + 1} {paths.log_path('baseline')}"
        _until(lambda: re.search(r"Decode batch, #running-req: ([4-9]|\d\d+),", sh(new_lines)), 60)
        started = on_target("systemctl", "start", second, check=False)
        assert started.returncode == 0, started.stderr
        assert unit_state(second)["ActiveState"] == "active"
        state = unit_state(first)
        assert (state["ActiveState"], state["Result"]) == ("inactive", "success"), state
        assert "Draining requests" in sh(new_lines)
        assert json.loads(load.communicate(timeout=120)[0]) == [200] * 4  # every request in flight completed
    finally:
        load.kill()
        load.wait()
        pyinfra()
