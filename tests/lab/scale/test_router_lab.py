"""The scale lab's replica set behind SGLang's real router (inventory/lab_scale.py: sglang1..3 on pve1
and pve2, the router on router1): a stream of requests from the controller through the router while
sglang2 is switched to another configuration (tasks/switch.py) and rolled back (tasks/rollback.py):
no request fails, and the router's worker list shows sglang2 leaving and coming back."""

import pytest

from tests.lab.conftest import lab_api_key, pyinfra
from tests.lab.scale.traffic import Watch

pytestmark = [pytest.mark.lab]
REPLICA = "sglang2"


@pytest.fixture(scope="module")
def lab(scale_lab) -> dict:
    """The router's address, the replica sglang2's and the servers' api-key, on the deployed scale lab."""
    from lab import layout

    _, _, router = layout.SCALE_GUESTS["router1"]
    _, _, replica = layout.SCALE_GUESTS[REPLICA]
    return {
        "inventory": scale_lab.inventory,
        "router": f"http://{router}:30000",
        "replica": f"http://{replica}:8000",
        "key": lab_api_key(),
    }


def _check(watch: Watch, lab: dict, output: str) -> None:
    assert watch.sent >= 20, output[-3000:]
    assert watch.failed == [], f"{len(watch.failed)} of {watch.sent} requests failed: {watch.failed[:5]}"
    assert watch.left_and_came_back(lab["replica"]), watch.lists[::10]
    assert len(watch.lists[-1]) == 3, watch.lists[-1]  # every replica serves again


def test_a_rolling_switch_of_a_replica_and_its_rollback_fail_no_request(lab):
    with Watch(lab["router"], lab["key"]) as watch:
        _, output = pyinfra(
            "--limit",
            REPLICA,
            "--data",
            "server=baseline-small-batch",
            inventory=lab["inventory"],
            deploy="tasks/switch.py",
        )
    print(f"switch: {watch.sent} requests, {len(watch.failed)} failed")
    _check(watch, lab, output)

    with Watch(lab["router"], lab["key"]) as watch:
        _, output = pyinfra("--limit", REPLICA, inventory=lab["inventory"], deploy="tasks/rollback.py")
    print(f"rollback: {watch.sent} requests, {len(watch.failed)} failed")
    _check(watch, lab, output)


def test_the_router_in_status(lab):
    _, output = pyinfra(inventory=lab["inventory"], deploy="tasks/status.py")
    assert "router of replica set llama" in output and ": ready" in output
    assert output.count("healthy, load") >= 3 and "smg_worker_health" in output
