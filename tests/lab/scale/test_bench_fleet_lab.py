"""tasks/bench.py on the scale lab's fleet (sglang_pve/deploy/fleet.py), with SGLang's real router in
front of the replica set: sglang2 is benched out of its router while a stream of requests goes
through the router (none fails; sglang2 leaves the router's worker list once, before its first
start, and comes back once what ran before runs again; the other two serve throughout), and a TP
group's rank is refused before anything runs, naming its group and what to run instead."""

import re

import pytest

from tests.lab.conftest import lab_api_key, pyinfra
from tests.lab.scale.conftest import on_guest
from tests.lab.scale.traffic import Watch

pytestmark = [pytest.mark.lab]
REPLICA = "sglang2"
SHORT = ("--data", "num_prompts=2", "--data", "output_len=32", "--data", "warmup=0")


def test_a_replica_is_benched_out_of_its_router_and_a_tp_rank_is_refused(scale_lab, tmp_path):
    from lab import layout
    from sglang_pve.deploy import paths

    _, _, router = layout.SCALE_GUESTS["router1"]
    _, _, replica = layout.SCALE_GUESTS[REPLICA]
    url = f"http://{replica}:8000"
    with Watch(f"http://{router}:30000", lab_api_key()) as watch:
        _, output = pyinfra(
            "--limit",
            REPLICA,
            *SHORT,
            "--data",
            "configs=baseline-small-batch",  # group_data/scale/replica.yml: one fresh start, then the restore
            "--data",
            f"bench_results_dir={tmp_path}",
            inventory=scale_lab.inventory,
            deploy="tasks/bench.py",
        )
    print(f"\nreplica bench: {watch.sent} requests, {len(watch.failed)} failed")
    assert watch.failed == [], f"{len(watch.failed)} of {watch.sent} requests failed: {watch.failed[:5]}"
    listed = [url in workers for workers in watch.lists]
    changes = [i for i in range(1, len(listed)) if listed[i] != listed[i - 1]]
    assert listed[0] and listed[-1] and len(changes) == 2, watch.lists[::10]  # out once, back once
    assert min(len(workers) for workers in watch.lists) == 2, watch.lists[::10]  # the other two serve
    steps = [
        f"{replica} is out of router",  # agent router-leave: removed, drained
        "baseline-small-batch (1/1): fresh start",
        "is running again",  # the restore of what ran before
        f"router http://{router}:30000: worker {url} is back, healthy",  # agent router-join
    ]
    at = [output.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), (at, output[-4000:])
    assert re.search(r"baseline-small-batch: [\d.]+ output tok/s", output), output[-3000:]
    assert on_guest("test", "-e", paths.BENCH_MARK, host=REPLICA, check=False).returncode != 0  # no mark left

    code, output = pyinfra("--limit", "sglang4", inventory=scale_lab.inventory, deploy="tasks/bench.py", check=False)
    assert code != 0
    assert "sglang4 is rank 0 of TP group tp (sglang4 rank 0, sglang5 rank 1)" in output, output[-3000:]
    assert "tasks/switch.py --data server=NAME --limit sglang4 --limit sglang5" in output, output[-3000:]
