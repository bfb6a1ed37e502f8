"""The NCCL probe without GPUs: its orchestration for real on the controller with torch (CPU) and
the gloo backend (the lab's simulator venv has no torch), a profile that hangs bounded by the
timeout, the noise rule of the analysis, and the measured profile written for the next deploy."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from sglang_pve.agent import allreduce_probe
from sglang_pve.tools import host_files
from sglang_pve.tools.nccl import analysis, measured

pytest.importorskip("torch", reason="the gloo path needs torch (CPU): pip install -e '.[test]'")


def _gloo(tmp: Path, profiles: dict, timeout_s: float, returncode: int = 0) -> dict:
    (tmp / "p.json").write_text(json.dumps(profiles))
    out = tmp / "r.json"
    command = [sys.executable, allreduce_probe.__file__, "--profiles", str(tmp / "p.json"), "--out", str(out)]
    command += ["--backend", "gloo", "--rounds", "2", "--trials", "3", "--iters", "2", "--max-bytes", str(1 << 20)]
    command += ["--timeout", f"{timeout_s:g}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s * len(profiles) + 300)
    assert done.returncode == returncode, done.stdout + done.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def gloo_result(tmp_path_factory):
    """Two runs, as the profiles need two bounds: the measured ones 300 s (a profile takes 12 s here
    with 2 cores, far more under CI load: one bound of 30 s for all three was too close), the one
    that hangs 10 s (rank 0 waits for 97 peers that never come: hung at any bound)."""
    measured = _gloo(
        tmp_path_factory.mktemp("probe"),
        {"nccl-defaults": {}, "pcie-tuned": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}},
        timeout_s=300,
    )
    hung = _gloo(tmp_path_factory.mktemp("hung"), {"stuck": {"WORLD_SIZE": "99"}}, timeout_s=10, returncode=1)
    return {**measured, "profiles": {**measured["profiles"], **hung["profiles"]}}


def test_gloo_probe_runs_a_fresh_group_per_profile_and_bounds_a_hang(gloo_result):
    profiles = gloo_result["profiles"]
    assert gloo_result["backend"] == "gloo" and gloo_result["world_size"] == 2
    assert profiles["stuck"]["status"] == "hung" and "killed" in profiles["stuck"]["error"]
    for name in ("nccl-defaults", "pcie-tuned"):
        assert profiles[name]["status"] == "ok"
        rows = profiles[name]["sizes"]
        assert [(r["regime"], r["bytes"]) for r in rows] == [
            (regime, n) for regime, _, n in allreduce_probe.sizes(1 << 20)
        ]
        assert rows[0]["bytes"] == 7168 * 2 and all(
            len(r["trials_us"]) == 6 and len(r["round_medians_us"]) == 2 and min(r["trials_us"]) > 0 for r in rows
        )
    report = analysis.render(gloo_result, {"decode": 0.8, "prefill": 0.2})
    assert "stuck: HUNG" in report and "overall (mix: decode 0.8, prefill 0.2)" in report


def test_profile_environment_drops_other_profiles_variables_and_the_conf_file():
    env = allreduce_probe.profile_env(
        {"NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0", "PATH": "/bin"},
        {"NCCL_P2P_DISABLE": 1},
        scrub=["NCCL_PROTO", "NCCL_P2P_DISABLE"],
    )
    assert env == {
        "NCCL_NVLS_ENABLE": "0",
        "PATH": "/bin",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_CONF_FILE": "/dev/null",
        "NCCL_CUMEM_ENABLE": "0",
    }


def _result(latencies: dict) -> dict:
    """profile -> (decode trials, prefill trials), one size per regime."""
    return {
        "world_size": 2,
        "profiles": {
            name: {
                "status": "ok",
                "sizes": [
                    {"regime": "decode", "label": "bs1", "bytes": 14336, "trials_us": dec},
                    {"regime": "prefill", "label": "32MiB", "bytes": 32 << 20, "trials_us": pre},
                ],
            }
            for name, (dec, pre) in latencies.items()
        },
    }


def test_a_winner_is_named_only_outside_the_noise_and_per_regime():
    result = _result(
        {
            "nccl-defaults": ([30, 31, 29, 30, 30], [300, 302, 298, 300, 301]),
            "ll": ([20, 21, 19, 20, 20], [870, 880, 860, 875, 870]),  # wins decode, loses prefill 2.9x
            "ll-simple": ([20, 26, 17, 31, 19], [301, 299, 300, 302, 300]),  # as fast, but noisy
        }
    )
    verdicts = analysis.analyse(result, {"decode": 0.8, "prefill": 0.2})
    assert verdicts["decode"].winner is None and set(verdicts["decode"].tied) == {"ll", "ll-simple"}
    assert verdicts["prefill"].winner is None and set(verdicts["prefill"].tied) == {"nccl-defaults", "ll-simple"}
    assert verdicts["overall"].scores["ll"][1] > verdicts["overall"].scores["ll-simple"][1]
    clear = analysis.analyse(
        _result({"nccl-defaults": ([30] * 5, [300] * 5), "ll": ([20, 21, 20, 19, 20], [290] * 5)}), {"decode": 1.0}
    )
    assert clear["decode"].winner == "ll" and clear["overall"].winner == "ll"


def test_bus_bandwidth_follows_nccl_tests():
    assert analysis.bus_bandwidth_gbs(1 << 30, 1e6, 2) == pytest.approx((1 << 30) / 1e9)
    assert analysis.bus_bandwidth_gbs(1 << 30, 1e6, 8) == pytest.approx((1 << 30) / 1e9 * 14 / 8)


def test_the_measured_profile_becomes_host_data_below_the_command_line(tmp_path):
    (tmp_path / "group_data").mkdir()
    measured.write(tmp_path, "gpu1", "pcie-tuned-ll-simple", "2026-11-30T12:00:00Z", "overall ll-simple")
    measured.write(tmp_path, "gpu2", "nccl-defaults", "2026-11-30T12:00:00Z", "overall")
    hosts = host_files.with_measured([("gpu1", {"ssh_user": "root"}), ("gpu3", {}), ("@pveguest/gpu2", {})], tmp_path)
    assert hosts == [
        ("gpu1", {"ssh_user": "root", "nccl_profile": "pcie-tuned-ll-simple"}),
        ("gpu3", {}),
        ("@pveguest/gpu2", {"nccl_profile": "nccl-defaults"}),
    ]
    assert set(measured.load(tmp_path)) == {"gpu1", "gpu2"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _probe(tmp_path, profiles: dict, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "p.json").write_text(json.dumps(profiles))
    command = [sys.executable, allreduce_probe.__file__, "--profiles", str(tmp_path / "p.json")]
    command += ["--out", str(tmp_path / "r.json"), "--backend", "gloo", "--rounds", "1", "--trials", "2"]
    command += ["--iters", "2", "--max-bytes", str(1 << 20), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_a_rendezvous_port_someone_else_holds_is_refused_before_any_rank_starts(tmp_path):
    with socket.socket() as squatter:  # a local user's listener, there first
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        done = _probe(tmp_path, {"nccl-defaults": {}}, "--port", str(squatter.getsockname()[1]))
    assert done.returncode != 0 and "cannot be bound for the rendezvous" in done.stderr, done.stderr
    assert "profile nccl-defaults:" not in done.stdout and not (tmp_path / "r.json").exists()  # no rank ran


def test_a_process_that_is_not_one_of_the_ranks_is_refused_at_the_rendezvous(tmp_path):
    """The ranks believe in 3 slots (WORLD_SIZE 3 in the profile), the driver starts 2: an outsider
    who reaches the store claims the third with a made-up proof, and the group measures nothing."""
    import torch.distributed as dist

    port = _free_port()
    claimed = []

    def outsider():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        store = dist.TCPStore("127.0.0.1", port, 3, is_master=False, timeout=timedelta(seconds=120))
        claimed.append(store.compare_set("peer/2", "", json.dumps({"pid": os.getpid(), "proof": "0" * 64})))

    thread = threading.Thread(target=outsider, daemon=True)
    thread.start()
    done = _probe(tmp_path, {"intruded": {"WORLD_SIZE": "3"}}, "--port", str(port), "--timeout", "200")
    thread.join(timeout=60)  # it claimed before the refusal; under load its append can come a little later
    entry = json.loads((tmp_path / "r.json").read_text())["profiles"]["intruded"]
    assert claimed and entry["status"] == "failed", (entry, done.stdout, done.stderr)
    assert "refused at the rendezvous" in entry["error"] and "rank 2" in entry["error"], entry["error"]
    assert done.returncode == 1  # no profile measured


def test_peers_are_the_drivers_children_with_this_runs_proof():
    import torch.distributed as dist

    token, me, driver = b"secret-of-this-run", os.getpid(), os.getppid()  # me: a child of `driver`

    def check(**slots: str) -> str | None:
        store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
        for key, value in slots.items():
            store.set(key.replace("_", "/"), value)
        return allreduce_probe.check_peers(store, 0, 2, token, driver)

    def claim(rank: int, secret: bytes = token, pid: int = me) -> str:
        return json.dumps({"pid": pid, "proof": allreduce_probe.proof(secret, rank, pid)})

    assert check(peer_1=claim(1)) is None
    assert "rank 1 at the rendezvous (pid" in check(peer_1=claim(1, b"a guess"))
    assert "rank 1 at the rendezvous (pid 1)" in check(peer_1=claim(1, pid=1))  # right proof, not our child
    assert "rank 0's slot at the rendezvous was taken" in check(peer_0=claim(0, pid=1), peer_1=claim(1))
    assert "rank 1 joined the rendezvous without a claim" in check(peer_1="not json")
