"""The zombie-proof server lifecycle against real systemd in the lab: every startup phase that
hangs fails the start within its stall deadline and leaves the GPUs free, a crash fails fast and
is named, a server wedged after ready is restarted by the watchdog and failed at the restart cap,
a leaked GPU holder of ours is reaped by PID while a foreign one blocks the start, and the agent's
`status --json` verdict says what happened after each scenario.

Faults come from the SGLang simulator's fault file (lab/sglang_sim/README.md); lab deadlines from
group_data/lab.py (stall 10 s per phase, watchdog every 2 s / 3 s timeout / 3 failures / 2 restarts).
Every test starts with every server unit stopped and ends by clearing what it set (no faults, no
restart history, nothing failed); the module ends with the deploy re-run so baseline runs again
(between tests the next test's first step stops every server, so a deploy there only started
baseline to stop it again: ~20 s a test on a loaded CI worker). Processes are only ever killed by
PIDs found precisely (their command line checked first).
"""

import json
import subprocess
import sys
import threading
import time

import pytest

from sglang_pve.agent import exitcodes, gate
from sglang_pve.deploy import paths
from tests.conftest import PROJECT, group_data
from tests.lab.conftest import (
    SIM_RUN_DIR,
    agent_status,
    diagnoses,
    gpu_holders,
    gpu_memory_used,
    kill_pid,
    on_target_python,
    process_info,
    put_file,
    read_diagnosis,
    refresh_simulator,
    restore_servers,
    server_status,
    set_faults,
    sh,
    sim_venv,
    status_record,
    unit_cgroup_pids,
    unit_state,
)
from tests.lab.pressure import SlotPressure

pytestmark = pytest.mark.lab

LAB = group_data("all", "lab")["lifecycle"]
STALL_S = LAB["stall_timeout_s"]
WATCHDOG = LAB["watchdog"]
GPU_IDLE_MIB = 1024  # the spec's gpu_idle_mib (render default)
SERVERS = ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step")
EAGLE3 = "eagle3-2step"
WEDGE_DELAY_S = 3.0  # the simulator's `wedge_after_ready: true`: healthy this long after "fired up"

# Run on the target: `systemctl start UNIT` timed with the target's monotonic clock, then wait
# until the unit has settled (no longer activating/deactivating). Prints one JSON object.
TIMED_START = r"""
import json, subprocess, sys, time
unit, limit = sys.argv[1], float(sys.argv[2])
def show():
    out = subprocess.run(["systemctl", "show", "-p", "ActiveState,SubState,Result,MainPID,ExecMainStatus", unit],
                         capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
t0 = time.monotonic()
done = subprocess.run(["systemctl", "start", unit], capture_output=True, text=True, timeout=limit)
returned = time.monotonic() - t0
while True:
    state = show()
    if state["ActiveState"] not in ("activating", "deactivating") or time.monotonic() - t0 > limit:
        break
    time.sleep(0.05)
print(json.dumps({"rc": done.returncode, "stderr": done.stderr, "returned_s": round(returned, 2),
                  "settled_s": round(time.monotonic() - t0, 2), **state}))
"""

# Run on the target: follow a unit's ActiveState/MainPID every 0.1 s until it is failed (or the
# limit); print the changes as JSON lines [seconds, ActiveState, SubState, MainPID, epoch].
WATCH_UNIT = r"""
import json, subprocess, sys, time
unit, limit = sys.argv[1], float(sys.argv[2])
t0, last = time.monotonic(), None
while time.monotonic() - t0 < limit:
    show = ["systemctl", "show", "-p", "ActiveState,SubState,MainPID", unit]
    out = subprocess.run(show, capture_output=True, text=True).stdout
    d = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    key = [d["ActiveState"], d["SubState"], d["MainPID"]]
    if key != last:
        print(json.dumps([round(time.monotonic() - t0, 2), *key, time.time()]), flush=True)
        last = key
    if d["ActiveState"] == "failed":
        break
    time.sleep(0.1)
"""


def timed_start(unit: str, limit: float = 240) -> dict:
    return json.loads(on_target_python(TIMED_START, unit, str(limit), timeout=limit + 30))


def stop_all_servers() -> None:
    """Every server unit stopped and not failed: the start under test measures only itself."""
    units = " ".join(paths.unit_name(s) for s in SERVERS)
    sh(f"systemctl stop {units}; systemctl reset-failed {units} 2>/dev/null; true", check=False)
    assert not gpu_holders(), "GPUs still held after stopping every server"


def journal_since(unit: str, since: float) -> str:
    return sh(f"journalctl -u {unit} --no-pager -o cat --since @{int(since) - 1}", check=False)


def target_time() -> float:
    return float(sh("date +%s.%N"))


def new_diagnoses(server: str, before: list[str]) -> list[dict]:
    return [read_diagnosis(name) | {"file": name} for name in diagnoses(server) if name not in before]


def assert_gpus_released(unit: str) -> None:
    """No process holds /dev/nvidia*, the unit's cgroup is empty and GPU memory is idle."""
    holders = gpu_holders()
    assert holders == {}, f"/dev/nvidia* still held: {holders} " + str({p: process_info(p) for p in holders})
    assert unit_cgroup_pids(unit) == [], f"{unit}'s cgroup is not empty: {unit_cgroup_pids(unit)}"
    assert sh(f"systemctl show -p ControlGroup --value {unit}").strip() == ""
    used = gpu_memory_used()
    assert max(used) <= GPU_IDLE_MIB, f"GPU memory not idle: {used} MiB"


@pytest.fixture(scope="module")
def lifecycle_lab(lab):
    # test_lab.py (earlier in the same session) ends with `lab down`, and every container start
    # has a fresh overlay: bring the lab up again and deploy from scratch where needed
    subprocess.run([sys.executable, "-m", "lab", "up"], cwd=PROJECT, check=True, capture_output=True)
    restore_servers()
    if refresh_simulator():  # the lab keeps the pinned version: reinstall when lab/sglang_sim changed
        sh(f"systemctl restart {paths.unit_name('baseline')}")
    yield lab
    output = restore_servers()
    unit = paths.unit_name("baseline")
    # once (CI, stop 26) inactive after a deploy that succeeded: what the deploy did and the unit said
    assert unit_state(unit)["ActiveState"] == "active", output + sh(f"journalctl -u {unit} -n 40 --no-pager")


@pytest.fixture
def clean(lifecycle_lab):
    """Every server stopped before the test; after it, whatever happened, no fault, no restart
    history and no unit left failed or half-started (the module's end deploys again)."""
    stop_all_servers()
    set_faults({})
    sh("rm -f /var/lib/sglang-pve/restarts/*.json", check=False)
    try:
        yield
    finally:
        restore_servers(deploy=False)


# --- 1. a hang in each startup phase --------------------------------------------------------------

PHASES = ["dist_init", "weights", "kv_cache", "draft", "cuda_graph", "http", "warmup"]


@pytest.mark.parametrize("phase", PHASES)
def test_hang_in_startup_phase_fails_start_within_stall_deadline_and_frees_gpus(clean, phase):
    """`hang: <phase>`: the simulator stops for good right after the phase's begin line (log
    silent, GPU memory held, port closed except for warmup). `systemctl start` must fail within
    the phase's stall timeout + 15 s of the hang, with a `stall` diagnosis naming the phase, and
    leave no process on /dev/nvidia* and an empty cgroup.

    The bounds are on the agents' own records, never on this test's clock: from the last progress
    the gate saw (status `last_progress_at`) to its verdict (`failed_at`) and to poststop's GPUs-free
    (`stopped`), plus the time the slot's guests waited for the machine meanwhile (tests/lab/pressure.py;
    ~0 on an idle machine). The time the start took to reach the phase is not the stall's and counts
    nowhere: a loaded guest may take a minute to get there.

    While it hangs, `status --json` is polled every ~1.5 s: it must say `starting (<phase>, ...)`,
    and its own /health probes (warmup: the port is open and answers 503) must not keep the
    gate from seeing the stall."""
    server = EAGLE3 if phase == "draft" else "baseline"
    unit = paths.unit_name(server)
    set_faults({server: {"hang": phase}})
    before = diagnoses(server)
    started_at = target_time()

    result: dict = {}
    starter = threading.Thread(target=lambda: result.update(timed_start(unit)))
    with SlotPressure() as pressure:
        starter.start()
        verdicts = []
        while starter.is_alive():
            verdicts.append(server_status(server)["verdict"])
            starter.join(timeout=1.5)
    record = status_record(server)
    hang, decided, freed = record["last_progress_at"], record["failed_at"], record["stopped"]
    waited = pressure.waited(hang, freed)
    print(
        f"\n{phase}: start -> {result.get('ActiveState')} after {result.get('settled_s')} s "
        f"(systemctl returned after {result.get('returned_s')} s); hang -> verdict {decided - hang:.1f} s, "
        f"-> GPUs free {freed - hang:.1f} s (stall {STALL_S[phase]} s; the slot waited {waited:.1f} s meanwhile)"
    )

    assert result["rc"] != 0 and result["ActiveState"] == "failed", result
    assert started_at < hang < decided < freed, record  # this start's records, in their order
    assert freed - hang <= STALL_S[phase] + 15 + waited, record

    found = new_diagnoses(server, before)
    assert [d["kind"] for d in found] == ["stall"], found
    diag = found[0]
    assert diag["phase"] == phase, diag["summary"]
    assert diag["summary"].startswith(f"stalled in {phase}: no log progress"), diag["summary"]
    # the gate decides at its first poll past the deadline: 2 s of slack for its own work
    assert STALL_S[phase] <= diag["seconds_stalled"] <= STALL_S[phase] + 2 + pressure.waited(hang, decided), diag
    assert any(v.startswith(f"starting ({phase}") for v in verdicts), verdicts
    assert diag["unit"] == unit and diag["log_tail"], diag
    assert any(h["ours"] for h in diag["holders"]), diag["holders"]  # every rank holds its GPU from dist init on

    assert_gpus_released(unit)
    assert unit_state(unit)["Result"] in ("exit-code", "signal")  # the gate exits 5 right after SIGKILLing main
    assert f"status={exitcodes.STALL}" in journal_since(unit, started_at)
    verdict = server_status(server)["verdict"]
    assert verdict.startswith(f"failed: stalled in {phase}"), verdict


def test_context_length_crash_fails_fast_and_names_the_value_error(clean):
    """`crash: context_length` on an EAGLE-3 configuration: the draft's context-length check
    raises SGLang's ValueError in the scheduler, the launcher kills its tree. The start fails
    well before any stall deadline and the diagnosis names the ValueError."""
    unit = paths.unit_name(EAGLE3)
    set_faults({EAGLE3: {"crash": "context_length"}})
    before = diagnoses(EAGLE3)

    with SlotPressure() as pressure:
        result = timed_start(unit)
    found = new_diagnoses(EAGLE3, before)
    record = status_record(EAGLE3)
    print(
        f"\ncrash: start -> {result['ActiveState']} after {result['settled_s']} s; "
        f"last line -> verdict {record['failed_at'] - record['last_progress_at']:.1f} s"
    )
    assert result["rc"] != 0 and result["ActiveState"] == "failed", result
    assert [d["kind"] for d in found] == ["crash"], found
    diag = found[0]
    # fast, no stall deadline involved: the crash path, decided after its grace for the traceback's
    # rest (gate.FATAL_GRACE_S, polled every gate.POLL_S), 1 s for the gate's own work, plus what the
    # slot waited meanwhile; the start's own seconds before the crash are not the gate's and count nowhere
    grace = gate.FATAL_GRACE_S + gate.POLL_S + 1 + pressure.waited(record["last_progress_at"], record["failed_at"])
    assert diag["seconds_stalled"] <= grace, diag
    # SGLang checks the draft's context length when it builds the draft's model config, before the
    # draft's `Load weight begin`: the last phase the log shows is the target's KV pool
    assert diag["phase"] in ("kv_cache", "draft"), diag["summary"]
    assert diag["summary"].startswith(f"crashed in {diag['phase']}: ValueError: "), diag["summary"]
    assert diag["reason"].startswith("ValueError: ") and "context_length" in diag["reason"], diag["reason"]
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in diag["reason"]
    assert_gpus_released(unit)
    verdict = server_status(EAGLE3)["verdict"]
    assert verdict.startswith(f"failed: crashed in {diag['phase']}: ValueError: ") and "context_length" in verdict, (
        verdict
    )


# --- 2. wedged after ready ----------------------------------------------------------------------


def test_wedge_after_ready_is_restarted_by_the_watchdog_then_failed_at_the_cap(clean):
    """`wedge_after_ready: true`: healthy for 3 s after "fired up", then TP0 stops taking
    requests (every process alive, /health hanging, log silent). The watchdog must restart the
    unit within its probe budget, twice (max_restarts 2), and then fail it for good, with
    `status --json` saying why (restart cap). While wedged, status says `zombie since ...`."""
    server, unit = "baseline", paths.unit_name("baseline")
    set_faults({server: {"wedge_after_ready": True}})
    before = diagnoses(server)
    # interval + timeout per probe, `failures` probes in a row, one interval of phase slack
    probe_budget = WATCHDOG["failures"] * (WATCHDOG["interval_s"] + WATCHDOG["timeout_s"]) + WATCHDOG["interval_s"]
    restart_bound = probe_budget + 10  # generous: scheduling, diagnosis writing
    # stop (SGLang drains on SIGTERM: up to SGLANG_SIM_SIGTERM_POLL 5 s + kill), poststop,
    # backoff, a fresh start of ~6 s; the lab's stop timeout bounds the stop
    back_bound = restart_bound + LAB["stop_timeout_s"] + WATCHDOG["backoff_max_s"] + 30

    sh(f"systemctl start --no-block {unit}")
    events: list = []
    # the watcher ends once the unit failed; its limit only ends a real hang (three starts, wedges
    # and restarts take ~2 min alone, several on a loaded CI worker)
    watcher = threading.Thread(
        target=lambda: events.extend(
            json.loads(line) for line in on_target_python(WATCH_UNIT, unit, "600", timeout=660).splitlines()
        )
    )
    with SlotPressure() as pressure:
        watcher.start()
        # a wedge: status must call it a zombie before the watchdog restarts it (any of the three)
        zombie = None
        while zombie is None and watcher.is_alive():
            entry = server_status(server)
            if entry["verdict"].startswith("zombie since"):
                zombie = entry
            time.sleep(1)
        watcher.join(timeout=660)
    print("\nwedge timeline (s, state, sub, main PID, epoch):\n  " + "\n  ".join(map(str, events)))

    assert zombie is not None, "status never said zombie while the server was wedged"
    assert zombie["state"]["ActiveState"] == "active" and zombie["phase"] == "ready"

    # each "active" period: wedge at +3 s; the watchdog's restart shows as active -> deactivating
    actives = [i for i, e in enumerate(events) if e[1] == "active"]
    assert len(actives) == 1 + WATCHDOG["max_restarts"], events
    # each bound plus what the slot's guests waited for the machine in that very window
    # (tests/lab/pressure.py; ~0 on an idle machine)
    wedge_to_restart, wedge_to_ready, restart_waited, ready_waited = [], [], [], []
    for n, i in enumerate(actives):
        wedged_at, wedged_epoch = events[i][0] + WEDGE_DELAY_S, events[i][4] + WEDGE_DELAY_S
        left = next(e for e in events[i + 1 :] if e[1] != "active")
        wedge_to_restart.append(round(left[0] - wedged_at, 1))
        restart_waited.append(pressure.waited(wedged_epoch, left[4]))
        if n < WATCHDOG["max_restarts"]:
            assert left[1] == "deactivating", events
            wedge_to_ready.append(round(events[actives[n + 1]][0] - wedged_at, 1))
            ready_waited.append(pressure.waited(wedged_epoch, events[actives[n + 1]][4]))
    print(
        f"wedge -> restart issued: {wedge_to_restart} s (bound {restart_bound:g} + the slot's wait "
        f"{restart_waited}); wedge -> ready again: {wedge_to_ready} s (bound {back_bound:g} + {ready_waited})"
    )
    assert all(0 < t <= restart_bound + w for t, w in zip(wedge_to_restart, restart_waited, strict=True)), events
    assert all(t <= back_bound + w for t, w in zip(wedge_to_ready, ready_waited, strict=True)), events
    main_pids = [events[i][3] for i in actives]
    assert len(set(main_pids)) == len(main_pids), main_pids  # a fresh server after each restart

    assert events[-1][1] == "failed", events
    found = new_diagnoses(server, before)
    assert [d["kind"] for d in found] == ["wedged"] * WATCHDOG["max_restarts"] + ["restart_cap"], found
    assert all(d["phase"] == "ready" and "/health_generate failed 3 times" in d["summary"] for d in found), found

    entry = server_status(server)
    assert entry["restarts"]["in_window"] == WATCHDOG["max_restarts"], entry["restarts"]
    assert entry["verdict"].startswith("failed: watchdog restart cap reached (2 restarts"), entry["verdict"]
    assert entry["diagnosis"].endswith(found[-1]["file"])
    assert_gpus_released(unit)


# --- 3. GPU holders left behind ------------------------------------------------------------------


def _wait_for(predicate, timeout: float, what: str, poll: float = 0.3):
    """`predicate()`'s first true value; `timeout` only ends a real hang (a loaded CI worker may
    take a minute for what takes seconds alone): generous, never a measurement."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def _leaked_pid() -> int | None:
    """PID of the simulator's leaked child, from its GPU record (role "leak") in the run dir."""
    out = sh(f'grep -l \'"role": "leak"\' {SIM_RUN_DIR}/gpus/*.json 2>/dev/null', check=False)
    for path in out.split():
        pid = int(path.rsplit("/", 1)[1].removesuffix(".json"))
        if pid in gpu_holders():
            return pid
    return None


def test_leaked_child_of_a_dead_server_is_reaped_by_pid_and_the_start_proceeds(clean):
    """How it happens in production: a server started outside its unit but with the unit's
    identity (an operator reproducing a problem with `systemd-run -E SGLANG_PVE_UNIT=...`, or an
    older hand-written unit with KillMode=process) is stopped. Only its main process is
    signalled; SGLang's own kill_process_tree then SIGKILLs the tree it knows, but a child that
    escaped (double fork, new session, SIGTERM ignored, no PDEATHSIG) keeps /dev/nvidia0 and
    1.5 GiB. Reproduced here with the simulator's `leak_child` under a transient unit with
    KillMode=process. `systemctl start sglang-baseline` must kill that holder by PID (it is
    ours: SGLANG_PVE_UNIT names this unit), say so naming the PID, and become ready."""
    unit = paths.unit_name("baseline")
    put_file("/tmp/stale-sim-faults.yaml", json.dumps({"baseline": {"leak_child": True}}) + "\n")
    sh("rm -f /tmp/stale-sim.log")
    sh(
        f"systemd-run --unit=stale-sim --collect -p KillMode=process -p StandardOutput=append:/tmp/stale-sim.log "
        f"-E SGLANG_PVE_UNIT={unit} -E SGLANG_SIM_FAULTS=/tmp/stale-sim-faults.yaml -E PYTHONUNBUFFERED=1 "
        f"{sim_venv()}/bin/python -m sglang.launch_server --config {paths.server_config_path('baseline')}"
    )
    leaked = None
    try:
        # let the stale server come up (its leak starts with the weights), then stop it
        _wait_for(lambda: "fired up" in sh("cat /tmp/stale-sim.log", check=False), 180, "the stale server to be ready")
        leaked = _leaked_pid()
        assert leaked, "the simulator did not leak a GPU holder"
        sh("systemctl stop stale-sim", check=False)
        _wait_for(lambda: list(gpu_holders()) == [leaked], 120, "only the leaked child to hold the GPUs")
        info = process_info(leaked)
        assert info["environ"].get("SGLANG_PVE_UNIT") == unit and "sglang.sim.leak" in info["cmdline"], info
        assert max(gpu_memory_used()) > GPU_IDLE_MIB  # it holds memory too
        report = agent_status()
        assert [(h["pid"], h["ours"], h["unit"]) for h in report["holders"]] == [(leaked, True, unit)], report[
            "holders"
        ]
        assert next(e for e in report["servers"] if e["server"] == "baseline")["verdict"] == "stopped"

        started_at = target_time()
        result = timed_start(unit)
        print(f"\nleak: start with a stale holder -> {result['ActiveState']} after {result['settled_s']} s")
        assert result["rc"] == 0 and result["ActiveState"] == "active", result
        assert process_info(leaked) is None or process_info(leaked)["state"] == "Z"
        journal = journal_since(unit, started_at)
        assert "killing stale processes of ours by PID" in journal and f"PID {leaked} (unit {unit})" in journal, journal
        assert leaked not in gpu_holders()
        assert server_status("baseline")["verdict"] == "ready"
    finally:
        sh("systemctl stop stale-sim 2>/dev/null; systemctl reset-failed stale-sim 2>/dev/null; true", check=False)
        if leaked:
            kill_pid(leaked, "sglang.sim.leak")


FOREIGN = "import os,time; os.open('/dev/nvidia0', os.O_PATH); time.sleep(600)"


def test_foreign_gpu_holder_blocks_the_start_naming_pid_and_command_line(clean):
    """A process that is not ours (no SGLANG_PVE_UNIT: a notebook, someone's benchmark) holds
    /dev/nvidia0. The agent never kills it: prestart refuses the start, naming its PID and
    command line; once it is gone (killed here by its PID), the server starts."""
    unit = paths.unit_name("baseline")
    sh(f'systemd-run --unit=foreign-gpu-holder --collect python3 -c "{FOREIGN}"')
    pid = int(sh("systemctl show -p MainPID --value foreign-gpu-holder").strip())
    try:
        _wait_for(lambda: pid in gpu_holders(), 120, "the foreign holder to open /dev/nvidia0")
        assert "SGLANG_PVE_UNIT" not in process_info(pid)["environ"]
        started_at = target_time()
        result = timed_start(unit)
        print(f"\nforeign: start refused after {result['settled_s']} s")
        assert result["rc"] != 0 and result["ActiveState"] == "failed", result
        journal = journal_since(unit, started_at)
        # refused at once: prestart's one wait for holders (one of ours still stopping) says so
        # (agent/reaper.py prestart); the seconds the start took depend on the machine's load
        assert f"waiting up to {LAB['gpu_free_timeout_s']:g}s for" not in journal, journal
        assert f"PID {pid} (foreign: not started by an sglang-pve unit): " in journal and FOREIGN in journal, journal
        assert "the agent never kills processes that are not its own" in journal
        assert f"status={exitcodes.REFUSED}" in journal
        assert process_info(pid) is not None and pid in gpu_holders()  # untouched
        assert unit_cgroup_pids(unit) == []
        verdict = server_status("baseline")["verdict"]
        assert verdict == "failed: GPUs held by other processes (prestart refused)", verdict
    finally:
        assert kill_pid(pid, "os.O_PATH")
        sh("systemctl reset-failed foreign-gpu-holder 2>/dev/null; true", check=False)
    # gone: the same start now succeeds
    sh(f"systemctl reset-failed {unit}")
    result = timed_start(unit)
    assert result["rc"] == 0 and result["ActiveState"] == "active", result
    assert server_status("baseline")["verdict"] == "ready"
