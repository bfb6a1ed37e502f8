"""The agent's side of a replica set (agent/router_worker.py) against SGLang's real router
(sglang-router, the pinned wheel) and two SGLang simulators, all on the loopback: a replica
leaves the router, is drained, switched and comes back while a stream of requests through the
router keeps succeeding; the router's status; its workers synced to the ready replicas."""

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sglang_pve.agent import exitcodes, router_worker
from sglang_pve.config.replica_set import ROUTER_VERSION

SIM_ROOT = Path(__file__).resolve().parents[2] / "lab" / "sglang_sim"
PHASES = "dist_init=0.02,weights=0.05,kv_cache=0.02,cuda_graph=0.05,http=0.02,warmup=0.05"
KEY = "router-test-key"
# The simulator's GPU memory per process: a small checkpoint, so two of them fit one fake GPU each.
INDEX = {"metadata": {"total_size": 10**9}, "weight_map": {"w": "model-00001-of-00001.safetensors"}}
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 4096}


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _get(url: str, key: str | None = KEY) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


# A bound on waits for the world to come up or for traffic, never a claim about time: at load 20 on
# the 2 cores the fixture took 37 s for its two simulators and the router (8 s alone), near the 30 s
# each wait had.
WAIT_S = 120.0


def _wait(predicate, timeout: float = WAIT_S, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.1)


class Sim:
    """One simulator (SGLang's `python -m sglang.launch_server --config`) in its own process group."""

    def __init__(self, root: Path, name: str, address: str, port: int):
        self.root, self.name, self.address, self.port = root, name, address, port
        self.popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def start(self) -> "Sim":
        run = self.root / f"run-{self.name}"
        run.mkdir(exist_ok=True)
        config = self.root / f"{self.name}.yaml"
        config.write_text(
            f"model-path: {self.root / 'model'}\nhost: {self.address}\nport: {self.port}\ntp-size: 1\napi-key: {KEY}\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(SIM_ROOT),
            "SGLANG_SIM_RUN_DIR": str(run),
            "SGLANG_SIM_DEV_DIR": str(self.root / "dev"),
            "SGLANG_SIM_FAULTS": str(self.root / "faults.yaml"),
            "SGLANG_SIM_PHASE_SECONDS": PHASES,
            "SGLANG_SIM_SIGTERM_POLL": "0.1",
        }
        with (self.root / f"{self.name}.log").open("ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "sglang.launch_server", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        _wait(lambda: _get(f"{self.url}/health", None)[0] == 200, what=f"{self.name} ready")
        return self

    def stop(self) -> None:
        """SIGTERM, as systemd's stop sends it: SGLang drains, then ends its own tree."""
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two replicas (127.0.0.1 and 127.0.0.2, as two containers' addresses) behind the real router."""
    root = tmp_path_factory.mktemp("router")
    (root / "model").mkdir()
    (root / "model/config.json").write_text(json.dumps(MODEL))
    (root / "model/model.safetensors.index.json").write_text(json.dumps(INDEX))
    (root / "dev").mkdir()
    for node in ("nvidiactl", "nvidia-uvm", "nvidia0"):
        (root / "dev" / node).touch()
    replicas = [
        Sim(root, "a", "127.0.0.1", _free_port("127.0.0.1")).start(),
        Sim(root, "b", "127.0.0.2", _free_port("127.0.0.2")).start(),
    ]
    port, metrics = _free_port(), _free_port()
    argv = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics), "--policy", "round_robin"]
    argv += ["--worker-urls", *(r.url for r in replicas), "--api-key", KEY, "--health-check-interval-secs", "1"]
    with (root / "router.log").open("ab") as log:
        router = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _get(f"{url}/readiness", None)[0] == 200, what="the router ready")
        _wait(lambda: len(router_worker.Router(url, KEY).workers()) == 2, what="both workers listed")
        yield {"router": url, "metrics": f"http://127.0.0.1:{metrics}/metrics", "replicas": replicas, "root": root}
    finally:
        os.killpg(router.pid, signal.SIGTERM)
        router.wait(timeout=30)
        for replica in replicas:
            replica.stop()


class Stream:
    """Requests through the router, one after another on each of two threads, until stopped."""

    def __init__(self, router: str):
        self.router, self.sent, self.failed = router, 0, []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]

    def _run(self) -> None:
        body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}).encode()
        while not self._stop.is_set() and self.sent < 5000:
            request = urllib.request.Request(
                f"{self.router}/generate",
                data=body,
                headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    outcome = response.status
            except urllib.error.HTTPError as error:
                outcome = error.code
            except OSError as error:
                outcome = str(error)
            with self._lock:
                self.sent += 1
                if outcome != 200:
                    self.failed.append(outcome)

    def __enter__(self) -> "Stream":
        for thread in self._threads:
            thread.start()
        _wait(lambda: self.sent >= 10, what="the first requests")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def _listed(router: str) -> dict[str, bool]:
    return {w["url"]: w["is_healthy"] for w in router_worker.Router(router, KEY).workers()}


def test_the_router_is_the_pinned_wheel():
    assert importlib.metadata.version("sglang-router") == ROUTER_VERSION


def test_status_shows_health_workers_and_metrics(world, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    report = router_worker.status(world["router"], world["metrics"], str(key_file))
    assert report["error"] is None and report["live"] and report["ready"]
    assert [(w["url"], w["healthy"]) for w in report["workers"]] == [(r.url, True) for r in world["replicas"]]
    assert any(name.startswith("smg_worker_health{") for name in report["metrics"])
    without_key = router_worker.status(world["router"], None, None)
    assert "HTTP 401" in without_key["error"]  # the worker API wants the router's key


def test_a_replica_leaves_is_switched_and_comes_back_while_requests_keep_succeeding(world):
    router, (a, b) = world["router"], world["replicas"]
    seen_during: dict[str, bool] = {}
    said: list[str] = []

    def switch() -> int:  # what the agent's switch does to the replica: stop, start the other configuration
        seen_during.update(_listed(router))
        a.stop()
        a.port = _free_port(a.address)  # the other configuration listens elsewhere
        a.start()
        return exitcodes.OK

    with Stream(router) as stream:
        code = router_worker.with_router(
            router, a.address, KEY, lambda text, error=False: said.append(text), 30, switch, lambda: a.url
        )
        _wait(lambda: stream.sent >= 40, what="requests after the switch")
    assert code == exitcodes.OK
    assert seen_during == {b.url: True}  # the replica was out of the router while it switched
    assert _listed(router) == {a.url: True, b.url: True}  # ... and is back, at its new URL
    assert stream.failed == [], f"{len(stream.failed)} of {stream.sent} requests failed: {stream.failed[:5]}"
    assert any("drained in" in line for line in said) and any("is back, healthy" in line for line in said)


def test_a_reverted_replica_comes_back_and_the_switch_code_stays(world):
    router, (a, b) = world["router"], world["replicas"]
    code = router_worker.with_router(
        router, a.address, KEY, lambda text, error=False: None, 30, lambda: exitcodes.SWITCH_REVERTED, lambda: a.url
    )
    assert code == exitcodes.SWITCH_REVERTED
    assert _listed(router) == {a.url: True, b.url: True}


def test_nothing_running_after_the_switch_stays_out(world):
    router, (a, b) = world["router"], world["replicas"]
    said: list[str] = []
    code = router_worker.with_router(
        router, a.address, KEY, lambda text, error=False: said.append(text), 30, lambda: exitcodes.OK, lambda: None
    )
    assert code == exitcodes.ROUTER and "stays out of router" in said[-1]
    assert _listed(router) == {b.url: True}
    assert router_worker.sync(router, None, [a.url, b.url], lambda text, error=False: None) == exitcodes.ROUTER  # 401
    key_file = world["root"] / "key"
    key_file.write_text(KEY)
    assert router_worker.sync(router, str(key_file), [a.url, b.url], lambda text, error=False: None) == exitcodes.OK
    assert _listed(router) == {a.url: True, b.url: True}
    assert router_worker.sync(router, str(key_file), [b.url], lambda text, error=False: None) == exitcodes.OK
    assert _listed(router) == {b.url: True}
    router_worker.sync(router, str(key_file), [a.url, b.url], lambda text, error=False: None)


def test_no_router_yet_switches_alone():
    said: list[str] = []
    url = f"http://127.0.0.1:{_free_port()}"
    code = router_worker.with_router(
        url, "127.0.0.1", KEY, lambda text, error=False: said.append(text), 1, lambda: 7, lambda: None
    )
    assert code == 7 and "switching without the router" in said[0]


def test_the_key_comes_from_the_configuration_switched_to_when_no_release_is_current(tmp_path, monkeypatch):
    """A first deploy: no release is current yet, the router beside the replicas already wants its key
    (found in the scale lab: the replica's switch got 401 from GET /workers and failed)."""
    from sglang_pve.agent import contract
    from sglang_pve.agent.release_store import Store

    monkeypatch.setattr(contract, "SECRETS_DIR", str(tmp_path))
    (tmp_path / "baseline.yaml").write_text(f"model-path: /m\napi-key: '{KEY}'\n")
    store = Store(str(tmp_path / "releases"))
    assert store.current() is None
    assert router_worker.router_key(store) is None
    assert router_worker.router_key(store, "baseline") == KEY
    assert router_worker.router_key(store, "missing") is None


def test_a_replica_left_out_for_a_bench_stays_out_until_it_joins_and_requests_keep_succeeding(world):
    """router-leave / router-join (a replica's bench, tools/bench/runner.py): out and drained, then
    out for as long as the bench runs (its mark says so to the router's worker sync), then what runs
    is back and the mark gone."""
    router, (a, b) = world["router"], world["replicas"]
    said: list[str] = []
    mark = world["root"] / "router-left.json"

    def say(text, error=False):
        said.append(text)

    with Stream(router) as stream:
        assert router_worker.leave(router, a.address, KEY, say, 30, mark=str(mark)) == exitcodes.OK
        out = _listed(router)
        left = json.loads(mark.read_text())
        assert (left["router"], left["address"], left["marker"]) == (router, a.address, "Managed by sglang-pve")
        sent = stream.sent
        _wait(lambda: stream.sent >= sent + 20, what="requests while it is out")
        still_out = _listed(router)
        assert router_worker.join(router, a.address, KEY, say, lambda: a.url, mark=str(mark)) == exitcodes.OK
        assert not mark.exists()
    assert out == still_out == {b.url: True}  # out, and nothing put it back while it stayed out
    assert _listed(router) == {a.url: True, b.url: True}
    assert stream.failed == [], f"{len(stream.failed)} of {stream.sent} requests failed: {stream.failed[:5]}"
    assert any("drained in" in line for line in said) and any("is back, healthy" in line for line in said)
    assert router_worker.join(router, a.address, KEY, say, lambda: None, mark=str(mark)) == exitcodes.ROUTER
    assert said[-1] == f"nothing runs on {a.address}: it stays out of router {router}"
    unreachable = f"http://127.0.0.1:{_free_port()}"
    assert (
        router_worker.leave(unreachable, "127.0.0.1", KEY, say, 1, mark=str(mark)) == exitcodes.OK
    )  # nothing to leave
    assert "does not answer" in said[-1]
    assert mark.exists()  # a router that comes up meanwhile does not add it either
    assert router_worker.join(unreachable, "127.0.0.1", KEY, say, lambda: a.url, mark=str(mark)) == exitcodes.OK
    assert "does not answer" in said[-1] and f"{a.url} is not added" in said[-1] and not mark.exists()
    assert router_worker.leave(unreachable, "127.0.0.1", KEY, say, 1, mark=str(mark)) == exitcodes.OK
    assert router_worker.leave(router, a.address, "not-the-key", say, 1, mark=str(mark)) == exitcodes.ROUTER  # 401
    assert not mark.exists()  # not out: no join follows, so no mark either


def test_after_a_restart_join_waits_for_the_start_at_boot_to_end(tmp_path, monkeypatch):
    """router-join --wait-s (provision/fleet_restart.py): at boot systemd queues the enabled unit's
    start as a job (`Job=87`, still inactive), then runs it (`activating` until its gate passed):
    joined only once neither is left (real systemd 252 prints `Job=` empty without one)."""
    states = ["ActiveState=inactive\nJob=87", "ActiveState=activating\nJob=87", "ActiveState=active\nJob="]
    script = tmp_path / "systemctl"
    count = tmp_path / "count"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        + "".join(
            f'[ "$n" = {i} ] && {{ printf "Id=x.service\\n%s\\n" "{s}"; exit 0; }}\n' for i, s in enumerate(states)
        )
        + f'printf "Id=x.service\\n%s\\n" "{states[-1]}"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(script))
    monkeypatch.setattr(router_worker, "STARTED_POLL_S", 0.01)
    said: list[str] = []
    assert router_worker.wait_started("x.service", 30, lambda text, error=False: said.append(text)) == "active"
    assert count.read_text().strip() == "3" and said == ["x.service is active after the restart"]
    count.write_text("1")  # a start that never ends: given up after wait_s, its state said
    script.write_text('#!/bin/sh\nprintf "Id=x.service\\nActiveState=activating\\nJob=87\\n"\n')
    assert router_worker.wait_started("x.service", 0.05, lambda text, error=False: said.append(text)) == "activating"
