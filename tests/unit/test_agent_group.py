"""A TP group's agents watch their peers (sglang_pve/agent/peers.py): with two real simulated
SGLang nodes on this host (rank 0 and rank 1 of `--nnodes 2`, the dist-init port on the
loopback), a stall on one rank fails both, each by its own gate; a rank above 0 is ready at
SGLang's dummy health server. Timing is asserted on the agents' recorded timestamps (the
diagnoses' epoch and seconds_stalled) against the configured stall timeout, never on wall time.
Only the rank whose stall a test is about has a short stall timeout: the other rank, and every
phase a test is not about, have bounds far above a loaded CI worker's pauses."""

import json
import socket
import threading
from pathlib import Path

import pytest
import yaml

from sglang_pve.agent import exitcodes, gate, peers, spec
from tests.unit.agent_support import messages, write_spec
from tests.unit.test_simulator import _group_of_two, lab, models  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("agent_env")
STALL_S = 2.0  # the hanging rank's weights stall timeout
SLACK_S = 30.0  # rank 0's notice after rank 1's stall: its gate's poll, rank 1's evidence and kill, under load
HANG_S = 300.0  # a gate still running after this hangs


def _specs(
    tmp_path: Path, rank0_config: Path, rank1_config: Path, port: int, stalling: int | None = None
) -> list[spec.Spec]:
    specs, rank0_port = [], yaml.safe_load(rank0_config.read_text())["port"]
    for rank, config in enumerate((rank0_config, rank1_config)):
        where = tmp_path / f"agent{rank}"
        where.mkdir()
        specs.append(
            write_spec(
                where,
                log=str(config.with_suffix(".log")),
                port=yaml.safe_load(config.read_text())["port"],
                stall_timeout_s={"weights": STALL_S} if rank == stalling else {},  # else write_spec's 60 s
                startup_timeout_s=HANG_S,
                group={
                    "name": "g",
                    "rank": rank,
                    "nnodes": 2,
                    "dist_init_port": port,
                    "addresses": ["127.0.0.1", "127.0.0.1"],
                    "rank0_port": rank0_port,  # both nodes on one host: each its own port
                },
            )
        )
    return specs


def _gate_in_thread(group_spec: spec.Spec, main_pid: int, results: dict) -> threading.Thread:
    def run() -> None:
        results[group_spec.group.rank] = gate.run(
            group_spec, main_pid, messages(), poll_s=0.1, on_ready=lambda s, pid: 99999
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _diagnosis(group_spec: spec.Spec) -> dict:
    (path,) = Path(group_spec.diagnoses_dir).glob("*.json")
    return json.loads(path.read_text())


def _start_group(lab, tmp_path, faults=None, stalling=None):  # noqa: F811
    rank0_config, rank1_config = _group_of_two(lab, tmp_path)
    port = int(yaml.safe_load(rank0_config.read_text())["dist-init-addr"].rsplit(":", 1)[1])
    lab.faults(faults or {})
    specs = _specs(tmp_path, rank0_config, rank1_config, port, stalling)
    sims = [lab.start(rank0_config), lab.start(rank1_config, SGLANG_SIM_RUN_DIR=str(tmp_path / "node1" / "run"))]
    return specs, sims


def test_a_stall_on_rank1_fails_the_whole_group_soon_after_the_stall_timeout(lab, tmp_path):  # noqa: F811
    specs, sims = _start_group(lab, tmp_path, {"tp": {"hang": "weights", "node_rank": 1}}, stalling=1)
    results: dict = {}
    threads = [_gate_in_thread(s, sim.popen.pid, results) for s, sim in zip(specs, sims, strict=True)]
    for thread in threads:
        thread.join(HANG_S)
    assert results == {0: exitcodes.PEER_GONE, 1: exitcodes.STALL}
    rank0, rank1 = _diagnosis(specs[0]), _diagnosis(specs[1])
    assert rank1["kind"] == "stall" and rank1["phase"] == "weights" and rank1["seconds_stalled"] >= STALL_S
    assert rank0["kind"] == "peer_gone" and "rank 1 (127.0.0.1) gone" in rank0["summary"]
    status0, status1 = (json.loads(Path(s.state_file("status")).read_text()) for s in specs)
    # rank 1's last progress (its hang), as its own gate recorded it; rank 0 failed by the peer's loss,
    # well before its own 60 s stall timeout could have failed it
    assert status1["failed_at"] - status1["last_progress_at"] >= STALL_S
    assert status0["failed_at"] - status1["last_progress_at"] <= STALL_S + SLACK_S
    for sim in sims:  # both main PIDs were SIGKILLed, their ranks followed (PDEATHSIG)
        sim.popen.wait(timeout=10)
        assert sim.popen.returncode == -9


def test_rank1_is_ready_at_the_dummy_health_server_and_rank0_at_fired_up(lab, tmp_path):  # noqa: F811
    specs, sims = _start_group(lab, tmp_path)
    results: dict = {}
    threads = [_gate_in_thread(s, sim.popen.pid, results) for s, sim in zip(specs, sims, strict=True)]
    for thread in threads:
        thread.join(HANG_S)
    assert results == {0: exitcodes.OK, 1: exitcodes.OK}
    # once ready, the peers are connected: rank 0 sees rank 1, rank 1 sees rank 0
    for group_spec in specs:
        assert peers.PeerWatch(group_spec.group).gone() == []
        assert all(peers.connected(group_spec.group, peers.established()).values())


def test_the_peer_watch_reads_the_kernels_connections(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    addresses = ["127.0.0.1", "127.0.0.1"]
    rank0 = peers.PeerWatch(spec.Group("g", 0, 2, port, addresses, 1))
    rank1 = peers.PeerWatch(spec.Group("g", 1, 2, port, addresses, 1))
    assert rank0.gone() == [] and rank1.gone() == []  # never connected: no loss
    client = socket.create_connection(("127.0.0.1", port))
    server_side, _ = listener.accept()
    assert rank0.gone() == [] and rank1.gone() == [] and rank0.seen == {1} and rank1.seen == {0}
    client.close()  # rank 1 dies: rank 0's end is gone once the kernel closed it
    server_side.close()
    assert rank0.gone() == [1] and rank1.gone() == [0]
    listener.close()


@pytest.mark.parametrize(
    "line, expected",
    [
        # IPv4 10.0.0.5:20000 -> 10.0.0.4:48812, ESTABLISHED
        ("0: 0500000A:4E20 0400000A:BEAC 01 00000000:00000000 00:00000000 00000000 0 0 1", ("10.0.0.5", 20000)),
        # IPv4-mapped in tcp6: ::ffff:10.0.0.4
        (
            "0: 0000000000000000FFFF00000500000A:4E20 0000000000000000FFFF00000400000A:BEAC 01 0 0 0 0 0 0 1",
            ("10.0.0.5", 20000),
        ),
    ],
)
def test_proc_net_tcp_lines_are_decoded(line, expected):
    (connection,) = peers.parse("header\n" + line)
    assert (connection.local, connection.local_port) == expected and connection.remote == "10.0.0.4"
    assert peers.parse("header\n" + line.replace(" 01 ", " 08 ")) == []  # CLOSE_WAIT is not established
