"""The replica set's rolling switch (deploy/rollout.py, agent/router_worker.py) in the scale lab when
more than one replica may be out, and when one fails its gate, with SGLang's real router (sglang-router
0.3.2 on router1) in front and a stream of requests through it that must see no failure.

- max_unavailable 2 (--data replica_sets=...): two of the three replicas leave the router at once,
  never all three (the router lists at least one healthy worker at every look), every one comes back.
- A replica whose new configuration fails its gate: the simulator's fault file is per guest
  (lab/sglang_sim/README.md), so the configuration switched to crashes on sglang2 and sglang3 only
  and passes on sglang1. Whichever of sglang2 and sglang3 switches first fails, is reverted (the
  configuration that ran before runs again, back in the router), and the run fails naming it; the
  other is never switched (its server is not restarted) and says where the rollout stopped.
"""

import json
import re
import runpy

import pytest

from tests.conftest import PROJECT
from tests.lab.conftest import AGENT_PYZ, FAULTS_FILE, lab_api_key, pyinfra
from tests.lab.scale.conftest import on_guest
from tests.lab.scale.traffic import Watch

pytestmark = [pytest.mark.lab]
REPLICAS = ("sglang1", "sglang2", "sglang3")
FAULTY = ("sglang2", "sglang3")
CONFIGS = ("baseline", "baseline-small-batch")  # group_data/scale/replica.yml
LIMIT = [word for name in REPLICAS for word in ("--limit", name)]


@pytest.fixture(scope="module")
def lab(scale_lab):
    """The router's address and the servers' api-key; afterwards no faults and every replica on
    baseline again (what the deploy runs: the modules after this one expect it)."""
    from lab import layout

    _, _, router = layout.SCALE_GUESTS["router1"]
    sets = runpy.run_path(str(PROJECT / scale_lab.inventory))["REPLICA_SETS"]
    yield {"inventory": scale_lab.inventory, "router": f"http://{router}:30000", "key": lab_api_key(), "sets": sets}
    for host in FAULTY:
        faults(host, {})
    left = [word for host in REPLICAS if running(host) != "baseline" for word in ("--limit", host)]
    if left:
        switch("baseline", lab_data(sets, 2), scale_lab.inventory, limit=left)


def lab_data(sets: dict, max_unavailable: int) -> list[str]:
    changed = {name: {**replica_set, "max_unavailable": max_unavailable} for name, replica_set in sets.items()}
    return ["--data", "replica_sets=" + json.dumps(changed)]


def faults(host: str, entries: dict) -> None:
    script = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
    on_guest("python3", "-c", script, FAULTS_FILE, json.dumps(entries) + "\n" if entries else "", host=host)


def servers(host: str) -> dict[str, dict]:
    report = json.loads(on_guest("python3", AGENT_PYZ, "status", "--json", host=host).stdout)
    return {entry["server"]: entry for entry in report["servers"]}


def running(host: str, states: dict[str, dict] | None = None) -> str:
    states = servers(host) if states is None else states
    (name,) = [name for name, entry in states.items() if entry["state"]["ActiveState"] == "active"]
    return name


def switch(server: str, data: list[str], inventory: str, check: bool = True, limit=LIMIT) -> tuple[int, str]:
    """tasks/switch.py on the replica set (or the members in `limit`): the rolling switch to `server`."""
    words = [*limit, "--data", f"server={server}", *data]
    return pyinfra(*words, inventory=inventory, deploy="tasks/switch.py", check=check)


def test_max_unavailable_2_takes_two_replicas_out_at_once_never_three(lab):
    target = next(c for c in CONFIGS if c != running("sglang1"))
    with Watch(lab["router"], lab["key"]) as watch:
        _, output = switch(target, lab_data(lab["sets"], 2), lab["inventory"])
    counts = [len(listed) for listed in watch.lists]
    print(f"\nmax_unavailable 2: {watch.sent} requests, {len(watch.failed)} failed; workers listed {counts[::5]}")
    assert watch.failed == [], f"{len(watch.failed)} of {watch.sent} requests failed: {watch.failed[:5]}"
    assert min(counts) == 1, counts  # two out at once, and the router kept one
    assert counts[-1] == 3, watch.lists[-1]
    assert all(watch.left_and_came_back(url) for url in watch.lists[0]), watch.lists[::5]
    assert [running(host) for host in REPLICAS] == [target] * 3, output[-3000:]


def test_a_replica_that_fails_its_gate_stops_the_rollout_is_reverted_and_the_others_serve(lab):
    states = {host: servers(host) for host in REPLICAS}
    (before,) = {running(host, states[host]) for host in REPLICAS}  # every replica runs the same
    target = next(c for c in CONFIGS if c != before)  # back to baseline after the test above: fewer to put back
    for host in FAULTY:
        faults(host, {target: {"crash": "context_length"}})
    with Watch(lab["router"], lab["key"]) as watch:
        code, output = switch(target, [], lab["inventory"], check=False)
    for host in FAULTY:
        faults(host, {})
    print(f"\nfailed gate: {watch.sent} requests, {len(watch.failed)} failed")
    assert code != 0, output[-3000:]
    assert watch.failed == [], f"{len(watch.failed)} of {watch.sent} requests failed: {watch.failed[:5]}"
    stopped = set(re.findall(r"the rolling switch of replica set llama stopped at \S*?(sglang\d)", output))
    assert len(stopped) == 1 and stopped <= set(FAULTY), output[-4000:]
    (failed,) = stopped
    (spared,) = set(FAULTY) - stopped
    assert re.search(rf"\[[^]]*{failed}\].*reverted: release \S+ runs again", output), output[-4000:]
    assert re.search(rf"\[[^]]*{spared}\].*not switched: the rolling switch", output), output[-4000:]
    assert running(failed) == running(spared) == before
    spared_now = servers(spared)[before]["state"]["ExecMainStartTimestampMonotonic"]
    assert spared_now == states[spared][before]["state"]["ExecMainStartTimestampMonotonic"]  # never stopped
    assert running("sglang1") in CONFIGS  # switched before the failure, or not switched after it
    assert len(watch.lists[-1]) == 3, watch.lists[-1]  # the reverted replica is back in the router
