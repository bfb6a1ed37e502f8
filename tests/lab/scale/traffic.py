"""Requests through the scale lab's router while a test changes its replicas (test_router_lab,
test_rollout_lab): every request's status, and the router's list of healthy workers every 0.2 s.

    with Watch(router_url, key) as watch:   # returns once 10 requests went through
        ...                                 # a rolling switch
    watch.failed, watch.lists               # [] when no request failed; [[url, ...], ...]
"""

import json
import threading
import time
import urllib.error
import urllib.request


def call(url: str, key: str, body: dict | None = None, timeout: float = 30) -> tuple[int | str, object]:
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

    def __init__(self, router: str, key: str):
        self.router, self.key, self.sent, self.failed, self.lists = router, key, 0, [], []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._requests, daemon=True) for _ in range(2)]
        self._threads.append(threading.Thread(target=self._workers, daemon=True))

    def _requests(self) -> None:
        body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}
        while not self._stop.is_set() and self.sent < 20000:
            status, _ = call(f"{self.router}/generate", self.key, body)
            with self._lock:
                self.sent += 1
                if status != 200:
                    self.failed.append(status)

    def _workers(self) -> None:
        while not self._stop.is_set():
            status, body = call(f"{self.router}/workers", self.key, timeout=10)
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
