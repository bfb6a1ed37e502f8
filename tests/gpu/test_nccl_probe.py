"""The NCCL probe on real GPUs: NCCL backend over every GPU, CUDA-graph timing, a hung profile
bounded by its timeout. Skipped without GPUs (conftest.py).

    python3 -m pytest tests/gpu/test_nccl_probe.py -v
"""

import json
import subprocess
import sys

from sglang_pve.agent import allreduce_probe
from sglang_pve.tools.nccl import analysis

PROBE = allreduce_probe.__file__


def _probe(tmp_path, profiles: dict, *args: str) -> dict:
    (tmp_path / "profiles.json").write_text(json.dumps(profiles))
    out = tmp_path / "result.json"
    subprocess.run(
        [
            sys.executable,
            PROBE,
            "--profiles",
            str(tmp_path / "profiles.json"),
            "--out",
            str(out),
            "--rounds",
            "2",
            "--trials",
            "3",
            "--iters",
            "10",
            *args,
        ],
        check=False,
        timeout=600,
    )
    return json.loads(out.read_text())


def test_probe_measures_each_profile_over_all_gpus_with_graph_captured_nccl(tmp_path):
    gpus = allreduce_probe._gpu_count()
    result = _probe(tmp_path, {"nccl-defaults": {}, "ll": {"NCCL_PROTO": "LL"}})
    assert result["backend"] == "nccl" and result["world_size"] == gpus
    for entry in result["profiles"].values():
        assert entry["status"] == "ok", entry
        assert entry["nccl"] and entry["world_size"] == gpus
        assert [row["label"] for row in entry["sizes"]] == [label for _, label, _ in allreduce_probe.sizes(64 << 20)]
        for row in entry["sizes"]:
            assert row["timing"] == "cuda graph" and len(row["trials_us"]) == 6 and min(row["trials_us"]) > 0
    verdicts = analysis.analyse(result, {"decode": 0.8, "prefill": 0.2})
    assert set(verdicts) == {"decode", "prefill", "overall"}
    assert all(v.winner or v.tied for v in verdicts.values())


def test_a_profile_that_never_completes_its_rendezvous_is_reported_hung(tmp_path):
    # WORLD_SIZE one larger than the ranks started: rank 0 waits for a peer that never comes.
    result = _probe(
        tmp_path, {"stuck": {"WORLD_SIZE": "99"}, "nccl-defaults": {}}, "--timeout", "30", "--max-bytes", str(1 << 20)
    )
    assert result["profiles"]["stuck"]["status"] == "hung"
    assert result["profiles"]["nccl-defaults"]["status"] == "ok"
