"""A replica's switch behind SGLang's router: out of the router, drained, switched, back in.

    with_router("http://10.200.0.14:30000", "10.200.0.12", key, say, drain_s=60,
                switch=lambda: switch.apply(...), running=lambda: running_url(store, "10.200.0.12"))

1. Every worker of the router whose URL names this replica's address is removed through the
   router's worker API (sglang-router 0.3.2, sgl-project/sglang sgl-model-gateway src/server.rs
   build_app: GET /workers lists {"workers": [{"id", "url", "is_healthy", ...}]}, DELETE
   /workers/{id} (a UUID, core/worker_service.rs WorkerService::delete_worker) queues the removal,
   202); done when the list no longer has it. The router sends it nothing new from then on.
   No router answers at all (a first deploy, before the router's own): the switch runs alone.
2. Drained: the replica's own GET /get_load (SGLang python/sglang/srt/entrypoints/http_server.py
   get_load: one entry per DP rank, `num_reqs` = running + waiting) until no request is left,
   within `drain_s` (a replica that does not answer has nothing in flight to wait for).
3. The switch (switch.py: stop, GPUs free, start, gate; reverted when the gate fails).
4. Whatever runs afterwards (the new configuration, or the reverted one) is added back: POST
   /workers {"url", "api_key"} (WorkerService::create_worker queues it, 202), done when the list
   shows it healthy, within ADD_TIMEOUT_S. Nothing runs (the revert failed too): it stays out.

The worker API wants the router's key (its --api-key; the replicas' api-key, the same secret) as
`Authorization: Bearer`. The exit code is the switch's; a replica that could not be added back
fails with ROUTER.
"""

import http.client
import json
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_pve.agent import contract, exitcodes, state, systemd
from sglang_pve.agent import spec as spec_module
from sglang_pve.agent.bench_client import read_api_key
from sglang_pve.agent.output import Say
from sglang_pve.agent.release_store import Store

POLL_S = 0.2
REMOVE_TIMEOUT_S = 30.0
STARTED_POLL_S = 1.0
ADD_TIMEOUT_S = 120.0  # the router health-checks a worker it adds before it lists it
_TIMEOUT_S = 10.0


class RouterError(RuntimeError):
    pass


class Unreachable(RouterError):
    """Nothing answers at the URL: no router runs there yet (a first deploy), or it is down."""


def _request(base: str, method: str, path: str, key: str | None, body: object = None) -> tuple[int, object]:
    parts = urllib.parse.urlsplit(base)
    if parts.scheme != "http" or not parts.hostname:
        raise RouterError(f"{base}: not an http:// URL")
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=_TIMEOUT_S)
    headers = {"User-Agent": "sglang-pve-agent", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        text = response.read()
    except OSError as error:
        raise Unreachable(f"{method} {base}{path}: {error}") from None
    finally:
        connection.close()
    try:
        return response.status, json.loads(text) if text else None
    except ValueError:
        return response.status, text.decode(errors="replace")


def host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""


@dataclass(frozen=True)
class Router:
    url: str
    key: str | None

    def workers(self) -> list[dict[str, Any]]:
        status, body = _request(self.url, "GET", "/workers", self.key)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("workers"), list):
            raise RouterError(f"GET {self.url}/workers: HTTP {status}: {str(body)[:200]}")
        return [w for w in body["workers"] if isinstance(w, dict)]

    def remove(self, address: str, say: Say) -> list[str]:
        """Remove every worker at `address`; returns their URLs (once the router no longer lists them)."""
        gone = [w for w in self.workers() if host_of(str(w.get("url"))) == address]
        for worker in gone:
            status, body = _request(self.url, "DELETE", f"/workers/{urllib.parse.quote(str(worker['id']))}", self.key)
            if status not in (200, 202):
                raise RouterError(f"DELETE {self.url}/workers/{worker['id']}: HTTP {status}: {str(body)[:200]}")
            say(f"router {self.url}: removing worker {worker['url']}")
        urls = [str(w["url"]) for w in gone]
        self._wait(lambda listed: not any(u in listed for u in urls), REMOVE_TIMEOUT_S, f"remove {', '.join(urls)}")
        return urls

    def add(self, url: str, say: Say) -> None:
        status, body = _request(self.url, "POST", "/workers", self.key, {"url": url, "api_key": self.key})
        if status not in (200, 202):
            raise RouterError(f"POST {self.url}/workers ({url}): HTTP {status}: {str(body)[:200]}")
        self._wait(lambda listed: listed.get(url) is True, ADD_TIMEOUT_S, f"add {url} (healthy)")
        say(f"router {self.url}: worker {url} is back, healthy")

    def _wait(self, done: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            listed = {str(w.get("url")): w.get("is_healthy") for w in self.workers()}
            if done(listed):
                return
            if time.monotonic() > deadline:
                raise RouterError(f"router {self.url}: could not {what} within {timeout:.0f} s (lists {listed})")
            time.sleep(POLL_S)


def drain(url: str, key: str | None, timeout: float, say: Say) -> float:
    """Wait until the replica at `url` has no request left; returns the seconds waited."""
    start = time.monotonic()
    while True:
        try:
            status, body = _request(url, "GET", "/get_load", key)
        except RouterError:
            return time.monotonic() - start  # not answering: nothing in flight to wait for
        left = sum(int(e.get("num_reqs", 0)) for e in body if isinstance(e, dict)) if isinstance(body, list) else 0
        if status != 200 or left == 0:
            waited = time.monotonic() - start
            say(f"{url} drained in {waited:.1f} s")
            return waited
        if time.monotonic() - start > timeout:
            say(f"{url}: {left} request(s) still in flight after {timeout:.0f} s; switching anyway", error=True)
            return time.monotonic() - start
        time.sleep(POLL_S)


def running_url(store: Store, address: str) -> str | None:
    """The worker URL of the configuration that runs now (its lifecycle spec's port), or None."""
    record = store.current()
    server = record.get("active_server") if record else None
    if not server or not systemd.in_states([contract.unit_name(server)], systemd.RUNNING):
        return None
    port = spec_module.load(contract.lifecycle_path(server)).port
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def router_key(store: Store, target: str | None = None) -> str | None:
    """The replicas' api-key (the router's too), from the running configuration's secret config, else
    from `target`'s (the configuration switched to): on a first deploy no release is current yet while
    the router, deployed beside its replicas, may already answer and want the key."""
    record = store.current()
    for server in (record.get("active_server") if record else None, target):
        path = contract.secret_config_path(server) if server else None
        key = read_api_key(path) if path and os.path.exists(path) else None
        if key:
            return key
    return None


def with_router(
    router_url: str,
    address: str,
    key: str | None,
    say: Say,
    drain_s: float,
    switch: Callable[[], int],
    running: Callable[[], str | None],
) -> int:
    """The switch with the replica out of the router (steps above); its exit code. `running()`:
    the worker URL of what runs after the switch (None: nothing runs)."""
    router = Router(router_url, key)
    try:
        removed = router.remove(address, say)
    except Unreachable as error:  # no router to take it out of, or to put it back into
        say(f"switching without the router: {error}")
        return switch()
    except RouterError as error:
        say(f"not switched: {error}", error=True)
        return exitcodes.ROUTER
    for url in removed:
        drain(url, key, drain_s, say)
    code = switch()
    now = running()
    if now is None:
        say(f"nothing runs on {address} after the switch: it stays out of router {router_url}", error=True)
        return code if code != exitcodes.OK else exitcodes.ROUTER
    try:
        router.add(now, say)
    except RouterError as error:
        say(f"{now} runs but is not back in the router: {error}", error=True)
        return code if code != exitcodes.OK else exitcodes.ROUTER
    return code


def leave(
    router_url: str, address: str, key: str | None, say: Say, drain_s: float, mark: str = contract.ROUTER_LEFT
) -> int:
    """Out of the router and drained (steps 1 and 2 above), to stay out until `join`: a replica's
    bench (tools/bench/runner.py) measures it alone while the others serve. No router answering:
    it sends the replica nothing, so there is nothing to leave. `mark` says so on the replica first
    (contract.ROUTER_LEFT): the router's worker sync, run by a deploy of its host meanwhile, leaves
    it out instead of adding it back."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state.write_json(mark, {"address": address, "marker": contract.MARKER, "router": router_url, "since": since})
    router = Router(router_url, key)
    try:
        removed = router.remove(address, say)
    except Unreachable as error:
        say(f"router {router_url} does not answer ({error}): it sends {address} nothing")
        return exitcodes.OK
    except RouterError as error:
        say(f"not out of the router: {error}", error=True)
        _unmark(mark)  # no join follows: the router's next sync may add it, as before
        return exitcodes.ROUTER
    for url in removed:
        drain(url, key, drain_s, say)
    say(f"{address} is out of router {router_url} until it is added back")
    return exitcodes.OK


def _unmark(mark: str) -> None:
    try:
        os.unlink(mark)
    except FileNotFoundError:
        pass


def join(
    router_url: str,
    address: str,
    key: str | None,
    say: Say,
    running: Callable[[], str | None],
    mark: str = contract.ROUTER_LEFT,
) -> int:
    """What runs on the replica now back in the router (step 4 above), after `leave`; `leave`'s mark
    goes first: one that cannot come back now is the router's next worker sync's to add."""
    _unmark(mark)
    now = running()
    if now is None:
        say(f"nothing runs on {address}: it stays out of router {router_url}", error=True)
        return exitcodes.ROUTER
    try:
        Router(router_url, key).add(now, say)
    except Unreachable as error:  # as leave: a router that is down sends it nothing; it starts with its --worker-urls
        say(f"router {router_url} does not answer ({error}): {now} is not added; its next start or sync adds it")
    except RouterError as error:
        say(f"{now} runs but is not back in router {router_url}: {error}", error=True)
        return exitcodes.ROUTER
    return exitcodes.OK


def wait_started(unit: str, wait_s: float, say: Say) -> str:
    """After the container restarted (provision/fleet_restart.py): wait until no start of `unit` is
    under way, within `wait_s`; its ActiveState then. At boot systemd queues the enabled unit's start
    as a job before it runs it, then the unit is `activating` until its gate passed (agent/gate.py)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = systemd.show([unit], ["ActiveState", "Job"]).get(unit, {})
        active = found.get("ActiveState", "")
        if (active != "activating" and not found.get("Job")) or time.monotonic() > deadline:
            say(f"{unit} is {active} after the restart")
            return active
        time.sleep(STARTED_POLL_S)


def _key_file(path: str | None) -> str | None:
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip() or None


# The router's own Prometheus metrics shown in status (sgl-model-gateway src/observability/metrics.rs).
METRICS = (
    "smg_worker_pool_size",
    "smg_worker_health",
    "smg_http_requests_total",
    "smg_router_upstream_responses_total",
)


def _metrics(url: str) -> dict[str, float]:
    """Sums of the router's metrics named in METRICS, by name and labels, from its Prometheus port."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=_TIMEOUT_S)
    try:
        connection.request("GET", parts.path or "/metrics")
        text = connection.getresponse().read().decode(errors="replace")
    except OSError:
        return {}
    finally:
        connection.close()
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.split("{", 1)[0] in METRICS:
            try:
                found[name] = float(value)
            except ValueError:
                continue
    return found


def status(router_url: str, metrics_url: str | None, key_file: str | None) -> dict[str, Any]:
    """The router's health (GET /liveness, /readiness: public), its workers' states (GET /workers)
    and its own metrics, as one JSON-able report; `error` says what could not be read."""
    report: dict[str, Any] = {"url": router_url, "live": False, "ready": False, "workers": [], "metrics": {}}
    report["error"] = None
    try:
        report["live"] = _request(router_url, "GET", "/liveness", None)[0] == 200
        report["ready"] = _request(router_url, "GET", "/readiness", None)[0] == 200
        workers = Router(router_url, _key_file(key_file)).workers()
        report["workers"] = [
            {"url": str(w.get("url")), "healthy": w.get("is_healthy") is True, "load": w.get("load")}
            for w in sorted(workers, key=lambda w: str(w.get("url")))
        ]
    except RouterError as error:
        report["error"] = str(error)
    if metrics_url:
        report["metrics"] = _metrics(metrics_url)
    return report


def _serves(url: str) -> bool:
    """The replica's own GET /health answers 200 (SGLang exempts it from the key)."""
    try:
        return _request(url, "GET", "/health", None)[0] == 200
    except RouterError:
        return False


def sync(router_url: str, key_file: str | None, members: list[str], say: Say) -> int:
    """Make the router's workers the `members` that serve: those not among them are removed, those
    that answer /health and are not listed are added; one that does not serve yet is left to the
    router (its --worker-urls job keeps trying it for --worker-startup-timeout-secs) and named."""
    router = Router(router_url, _key_file(key_file))
    try:
        listed = {str(w.get("url")): w for w in router.workers()}
        for url, worker in sorted(listed.items()):
            if url not in members:
                _request(router_url, "DELETE", f"/workers/{urllib.parse.quote(str(worker['id']))}", router.key)
                say(f"router {router_url}: removing worker {url} (not a ready replica)")
        router._wait(lambda now: not (set(now) - set(members)), REMOVE_TIMEOUT_S, "remove what is not ready")
        for url in members:
            if url in listed:
                continue
            if _serves(url):
                router.add(url, say)
            else:
                say(f"router {router_url}: {url} does not serve yet; not added")
    except RouterError as error:
        say(str(error), error=True)
        return exitcodes.ROUTER
    return exitcodes.OK
