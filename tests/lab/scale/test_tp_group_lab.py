"""The scale lab's TP group (inventory/lab_scale.py): sglang4 on pve1 is rank 0, sglang5 on pve2
rank 1, one SGLang configuration over both (--nnodes 2, the simulator's rendezvous on rank 0's
dist-init port across the lab bridge), deployed by the toolkit through both nodes' APIs.

A hang injected on rank 1 (weights): rank 1's gate fails it at the stall timeout, rank 0's gate sees
rank 1 gone (peer watch) and fails too, every rank's poststop verifies its node's GPUs free; the
rerun (the deploy again) brings the group back. The bound is asserted on the agents' recorded epoch
timestamps, never on this test's wall time: rank 1's last progress (its gate's last_progress_at)
to each rank's `stopped` (recorded by poststop once no process holds /dev/nvidia* and memory is
idle) must be within the stall timeout plus 5 s (issue 17), plus the seconds the slot's guests
waited for the machine in that window as the kernel counted them (tests/lab/pressure.py: ~0 on an
idle machine, seconds on a loaded CI worker). Both guests read the lab host's one clock.
Rank 0 loads its weights for RANK0_WEIGHTS_S meanwhile (a line every quarter: 4 shards): left at
the default 1.2 s it would wait silently in the KV-pool collective and meet its own stall deadline
~1 s after rank 1's, a race the peer watch loses whenever rank 1's gate takes longer than that to
collect its diagnosis and kill (a loaded machine); busy loading, rank 0 can only fail by the peer
watch, which is what this test proves.

A deploy of a new SGLang version whose start crashes on rank 1 only, before it joins rank 0 (a fault
keyed by that version): both ranks stop before either starts, rank 1 fails and waits for rank 0,
which fails at its dist_init stall timeout, then both stop and only then run the release that ran
before again, ready as one group (deploy/group_switch.py). Before, rank 1 reverted alone at once,
its old server joined rank 0's new one, and the run ended with rank 0 on the new release, rank 1 on
the old one (seen on slot 8 with the code before: rank 0 "Success").

Cost (slot 8, 2 cores shared by 8 helpers): 290 s alone from a lab without the scale node or
guests (lab up --scale, the six scale guests provisioned by the nodes' deploy, both members
deployed), 134 s with the group deployed already. Measured: hang -> rank 1 failed 10.2-10.3 s,
rank 0 failed 11.0-11.3 s, GPUs free 12.3-13.5 s (stall timeout 10 s; two runs). At load 15-25 (slot 4,
rank 0 busy loading): rank 1 failed 10.6 s, rank 0 16.9 s, GPUs free 18.3 / 18.9 s, the slot waited
9.5 / 9.9 s meanwhile (bound 15 s + that).
"""

import json
import re
import time

import pytest

from sglang_pve.deploy.paths import RELEASES_DIR
from tests.conftest import group_data
from tests.lab.conftest import AGENT_PYZ, FAULTS_FILE, grand_total, pyinfra
from tests.lab.pressure import SlotPressure
from tests.lab.scale.conftest import on_guest

pytestmark = pytest.mark.lab

RANK0, RANK1 = "sglang4", "sglang5"
UNIT = "sglang-baseline.service"
STATUS = "/var/lib/sglang-pve/status/baseline.json"
LIMIT = ("--limit", "pve1", "--limit", "pve2", "--limit", RANK0, "--limit", RANK1)
STALL_S = group_data("lab")["lifecycle"]["stall_timeout_s"]["weights"]
RANK0_WEIGHTS_S = 2 * STALL_S  # 4 shards: a line every STALL_S / 2, silent only 2 stall deadlines in


def deploy_group() -> str:
    """The TP group's members (and the nodes, which provision every scale guest) deployed."""
    code, output = pyinfra(*LIMIT, inventory="inventory/lab_scale.py")
    return output


@pytest.fixture(scope="module")
def group(scale_lab):
    """The scale lab, deployed once for every module under tests/lab/scale (its conftest)."""
    yield
    for host in (RANK0, RANK1):
        faults(host, {})


def faults(host: str, entries: dict) -> None:
    text = json.dumps(entries) + "\n" if entries else ""
    script = (
        "import os, sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); "
        "open(sys.argv[1], 'w').write(sys.argv[2])"
    )
    on_guest("python3", "-c", script, FAULTS_FILE, text, host=host)


def status(host: str) -> dict:
    return json.loads(on_guest("cat", STATUS, host=host).stdout)


def agent_entry(host: str) -> dict:
    report = json.loads(on_guest("python3", AGENT_PYZ, "status", "--json", host=host).stdout)
    return next(entry for entry in report["servers"] if entry.get("server") == "baseline")


def stopped_after_failing(host: str) -> bool:
    """poststop recorded this start's stop (its `stopped` after the gate's `failed_at`)."""
    record = status(host)
    return record.get("stopped", 0) > record.get("failed_at", 0)


def active_state(host: str) -> str:
    return on_guest("systemctl", "show", "-p", "ActiveState", "--value", UNIT, host=host).stdout.strip()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def gpu_memory_used(host: str) -> list[int]:
    out = on_guest("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", host=host).stdout
    return [int(value) for value in out.split()]


def test_both_ranks_serve_as_one_group(group):
    rank0, rank1 = agent_entry(RANK0), agent_entry(RANK1)
    assert rank0["verdict"] == rank1["verdict"] == "ready"
    assert (rank0["group"], rank1["group"]) == (
        {"name": "tp", "rank": 0, "nnodes": 2},
        {"name": "tp", "rank": 1, "nnodes": 2},
    )
    assert rank0["health"]["status"] == rank1["health"]["status"] == 200  # rank 1: SGLang's dummy server
    log1 = on_guest("cat", "/var/log/sglang/baseline.log", host=RANK1).stdout
    assert "Dummy health check server started in background thread at 0.0.0.0:8000" in log1
    assert "TP4]" in log1 and "TP0]" not in log1 and "fired up" not in log1


def test_a_hang_on_rank_1_fails_the_group_frees_both_nodes_gpus_and_the_rerun_brings_it_back(group):
    for host in (RANK0, RANK1):
        on_guest("systemctl", "stop", UNIT, host=host)
    faults(RANK1, {"baseline": {"hang": "weights"}})
    faults(RANK0, {"baseline": {"phase_seconds": {"weights": RANK0_WEIGHTS_S}}})
    with SlotPressure() as pressure:
        for host in (RANK0, RANK1):  # both ranks start again, as a rerun of a stopped group would
            on_guest("systemctl", "start", "--no-block", UNIT, host=host)
        for host in (RANK0, RANK1):  # generous: only a real hang ends these waits
            wait_for(lambda h=host: active_state(h) == "failed", 4 * STALL_S + 120, f"{UNIT} on {host} to fail")
            wait_for(lambda h=host: stopped_after_failing(h), 120, f"poststop on {host}")
    rank0, rank1 = status(RANK0), status(RANK1)
    assert rank1["verdict"].startswith("failed: stalled in weights"), rank1["verdict"]
    assert rank0["verdict"].startswith("failed: TP group tp: rank 1 (10."), rank0["verdict"]
    assert rank0["gpus_free"] is True and rank1["gpus_free"] is True
    hang = rank1["last_progress_at"]  # rank 1's last log progress, as its own gate recorded it
    assert rank1["failed_at"] - hang >= STALL_S  # the stall path, not something faster
    assert rank0["failed_at"] > rank1["failed_at"]  # rank 0 followed rank 1's verdict
    waited = {host: pressure.waited(hang, record["stopped"]) for host, record in ((RANK0, rank0), (RANK1, rank1))}
    print(
        f"\nhang -> rank 1 failed {rank1['failed_at'] - hang:.1f}s, rank 0 failed {rank0['failed_at'] - hang:.1f}s, "
        f"GPUs free rank 1 {rank1['stopped'] - hang:.1f}s, rank 0 {rank0['stopped'] - hang:.1f}s (stall {STALL_S}s; "
        f"bound {STALL_S + 5}s + the slot's wait meanwhile: rank 1 {waited[RANK1]:.1f}s, rank 0 {waited[RANK0]:.1f}s)"
    )
    for host, record in ((RANK0, rank0), (RANK1, rank1)):
        assert record["stopped"] - hang <= STALL_S + 5 + waited[host], (record["stopped"] - hang, waited, record)
    for host in (RANK0, RANK1):
        assert max(gpu_memory_used(host)) <= 1024  # each node's GPUs idle (the poststop's own check)

    for host in (RANK0, RANK1):
        faults(host, {})
    output = deploy_group()
    assert grand_total(output)["error"] == 0
    for host in (RANK0, RANK1):
        assert agent_entry(host)["verdict"] == "ready"


def releases(host: str) -> dict:
    return json.loads(on_guest("python3", AGENT_PYZ, "releases", "--dir", RELEASES_DIR, host=host).stdout)


def unit_times(host: str) -> dict[str, int]:
    """When the unit last left and entered inactive/failed, on CLOCK_MONOTONIC in us (systemd's
    InactiveExit/EnterTimestampMonotonic; a failed->inactive reset-failed moves neither: systemd
    src/core/unit.c unit_notify). The guests are containers of one kernel: one clock for both."""
    shown = on_guest(
        "systemctl", "show", "-p", "InactiveEnterTimestampMonotonic,InactiveExitTimestampMonotonic", UNIT, host=host
    ).stdout
    return {key: int(value) for key, value in (line.split("=", 1) for line in shown.split())}


def test_a_release_that_fails_on_rank_1_reverts_every_rank(group):
    """A deploy of a new SGLang version (the lab index's good nightly) to the group, whose start
    crashes on rank 1 only, before dist init (the fault keyed by that version, lab/sglang_sim/
    README.md): the run fails naming rank 1, and both ranks run the release that ran before again,
    as one group, ready. The revert is the group's (deploy/group_switch.py): no rank started the old
    release before every rank's new server had stopped (before, rank 1 reverted at its own failure
    and its old server joined rank 0's new one, which then served)."""
    from lab import layout

    before = {host: releases(host)["current"] for host in (RANK0, RANK1)}
    faults(RANK1, {"baseline": {"crash": "context_length", "version": layout.GOOD_NIGHTLY}})
    code, output = pyinfra(
        *LIMIT, "--data", f'sglang_version="{layout.GOOD_NIGHTLY}"', inventory="inventory/lab_scale.py", check=False
    )
    faults(RANK1, {})
    assert code != 0, output[-4000:]
    assert re.search(rf"\[{RANK1}\].*switch to release \S+ failed: .*crashed in launch", output), output[-4000:]
    for host in (RANK0, RANK1):
        group_line = rf"\[{host}\].*TP group tp: the switch failed on .*{RANK1}: every rank stopped before any started"
        assert re.search(group_line, output), (host, output[-4000:])
    times = {host: unit_times(host) for host in (RANK0, RANK1)}
    last_stop = max(t["InactiveEnterTimestampMonotonic"] for t in times.values())  # the new servers' ends
    assert all(t["InactiveExitTimestampMonotonic"] > last_stop for t in times.values()), times  # the reverts' starts
    for host in (RANK0, RANK1):
        report = releases(host)
        assert report["current"] == before[host], (host, output[-4000:])
        tried = report["releases"][-1]
        assert (tried["sglang_version"], tried["status"]) == (layout.GOOD_NIGHTLY, "failed"), (host, tried)
        assert agent_entry(host)["verdict"] == "ready", (host, output[-4000:])
