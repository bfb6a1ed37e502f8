"""The scale lab's replica set behind SGLang's real router (inventory/lab_scale.py: sglang1..3 on pve1
and pve2, the router on router1): a stream of requests from the controller through the router while
sglang2 is switched to another configuration (tasks/switch.py) and rolled back (tasks/rollback.py):
no request fails, and the router's worker list shows sglang2 leaving and coming back."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.lab.conftest import lab_api_key, pyinfra

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


def _call(url: str, key: str, body: dict | None = None, timeout: float = 30) -> tuple[int | str, object]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}", **({"Content-Type": "application/json"} if data else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read()[:200]
    except OSError as error:
        return str(error), None


class Watch:
    """Requests through the router on two threads, and its worker list every 0.2 s, until stopped."""

    def __init__(self, lab: dict):
        self.lab, self.sent, self.failed, self.lists = lab, 0, [], []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._requests, daemon=True) for _ in range(2)]
        self._threads.append(threading.Thread(target=self._workers, daemon=True))

    def _requests(self) -> None:
        body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}
        while not self._stop.is_set() and self.sent < 20000:
            status, _ = _call(f"{self.lab['router']}/generate", self.lab["key"], body)
            with self._lock:
                self.sent += 1
                if status != 200:
                    self.failed.append(status)

    def _workers(self) -> None:
        while not self._stop.is_set():
            status, body = _call(f"{self.lab['router']}/workers", self.lab["key"], timeout=10)
            if status == 200 and isinstance(body, dict):
                self.lists.append(sorted(w["url"] for w in body["workers"] if w["is_healthy"]))
            time.sleep(0.2)

    def __enter__(self) -> "Watch":
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 60
        while self.sent < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def left_and_came_back(self, url: str) -> bool:
        """The list had `url`, then lacked it, then had it again."""
        seen = [url in listed for listed in self.lists]
        return bool(seen) and seen[0] and not all(seen) and seen[-1]


def _check(watch: Watch, lab: dict, output: str) -> None:
    assert watch.sent >= 20, output[-3000:]
    assert watch.failed == [], f"{len(watch.failed)} of {watch.sent} requests failed: {watch.failed[:5]}"
    assert watch.left_and_came_back(lab["replica"]), watch.lists[::10]
    assert len(watch.lists[-1]) == 3, watch.lists[-1]  # every replica serves again


def test_a_rolling_switch_of_a_replica_and_its_rollback_fail_no_request(lab):
    with Watch(lab) as watch:
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

    with Watch(lab) as watch:
        _, output = pyinfra("--limit", REPLICA, inventory=lab["inventory"], deploy="tasks/rollback.py")
    print(f"rollback: {watch.sent} requests, {len(watch.failed)} failed")
    _check(watch, lab, output)


def test_the_router_in_status(lab):
    _, output = pyinfra(inventory=lab["inventory"], deploy="tasks/status.py")
    assert "router of replica set llama" in output and ": ready" in output
    assert output.count("healthy, load") >= 3 and "smg_worker_health" in output
