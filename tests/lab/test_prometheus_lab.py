"""The agent's metrics through a real Prometheus (Debian's `prometheus` package, Makefile
SYSTEM_PACKAGES): it runs on the controller, the lab host, where a user's Prometheus reads the
file_sd JSON tasks/scrape_targets.py writes (the guests reach nothing off the lab bridge, the lab
host reaches them), scrapes the guest's prometheus-node-exporter (installed by the deploy) and
SGLang's /metrics every second, and is asked through its HTTP API (/api/v1/query): after a deploy,
after a switch into an injected hang (the simulator's hang fault) and its revert."""

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from lab import layout
from tests.conftest import group_data
from tests.lab.conftest import HOST, pyinfra, restore_servers, set_faults

pytestmark = pytest.mark.lab

PROMETHEUS = shutil.which("prometheus")
HUNG = "eagle3-2step"
STALL_TIMEOUT_S = group_data("all", "lab")["lifecycle"]["stall_timeout_s"]["cuda_graph"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def own_targets(sd_dir) -> None:
    """tasks/scrape_targets.py's file for this lab's guest, written where this Prometheus reads
    (scrape_targets_dir): test workers on other lab slots write theirs under the same host name."""
    pyinfra("--limit", HOST, "--data", f"scrape_targets_dir={sd_dir}", deploy="tasks/scrape_targets.py")
    groups = json.loads((sd_dir / f"{HOST}.json").read_text())
    assert all(t.startswith(layout.SGLANG_HOSTS[HOST] + ":") for g in groups for t in g["targets"]), groups


@pytest.fixture(scope="module")
def prometheus(lab, tmp_path_factory):
    """Prometheus on 127.0.0.1, scraping what file_sd names each second; its URL."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (make test installs it)")
    restore_servers()  # the deploy: node_exporter installed, baseline ready
    root = tmp_path_factory.mktemp("prometheus")
    sd_dir = root / "file_sd"
    sd_dir.mkdir()
    own_targets(sd_dir)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        # one job: each target's own `job` label (node, sglang) is kept, as file_sd labels override it
        "scrape_configs": [{"job_name": "sglang-pve", "file_sd_configs": [{"files": [str(sd_dir / "*.json")]}]}],
    }
    (root / "prometheus.yml").write_text(json.dumps(config))  # YAML is a superset of JSON
    url = f"http://127.0.0.1:{free_port()}"
    log = open(root / "prometheus.log", "w")
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address={url.removeprefix('http://')}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: up(url), f"Prometheus at {url} (log {root / 'prometheus.log'})")
        yield url
    finally:
        server.terminate()  # our own child, by its pid
        server.wait(timeout=30)
        log.close()
        set_faults({})


def up(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def query(url: str, expression: str) -> dict[tuple, float]:
    """An instant query's result: each series' labels (sorted, without __name__) -> its value."""
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}") as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return {
        tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(r["value"][1])
        for r in body["data"]["result"]
    }


def wait_for(condition, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.5)
    return result


def value(url: str, expression: str) -> float | None:
    """The one value of `expression`, None while it has no series."""
    result = query(url, expression)
    assert len(result) <= 1, result
    return next(iter(result.values()), None)


def test_prometheus_scrapes_the_guest_s_node_exporter_and_sglang(prometheus):
    wait_for(lambda: value(prometheus, 'up{job="node"}') == 1, "the node_exporter target up")
    wait_for(lambda: value(prometheus, 'up{job="sglang"}') == 1, "SGLang's /metrics target up")
    assert value(prometheus, 'node_textfile_scrape_error{job="node"}') == 0  # the agent's file parsed


def test_after_a_deploy_baseline_is_ready_through_prometheus(prometheus):
    ready = 'sglang_pve_server_ready{server="baseline",job="node"}'
    wait_for(lambda: value(prometheus, ready) == 1, f"{ready} == 1")
    assert value(prometheus, f'sglang_pve_server_ready{{server="{HUNG}"}}') == 0
    assert value(prometheus, 'sglang_pve_server_phase{server="baseline",phase="ready"}') == 1
    info = query(prometheus, "sglang_pve_release_info")
    assert [dict(labels)["server"] for labels in info] == ["baseline"]


def test_a_switch_into_a_hang_shows_the_stall_and_the_revert(prometheus):
    reverts = 'sglang_pve_switch_reverts_total{job="node"}'
    before = wait_for(lambda: query(prometheus, reverts), f"{reverts} scraped")
    set_faults({HUNG: {"hang": "cuda_graph"}})
    try:
        code, output = pyinfra("--data", f"server={HUNG}", deploy="tasks/switch.py", check=False)
    finally:
        set_faults({})
    assert code != 0 and "reverted: release" in output, output
    count = next(iter(before.values()))
    wait_for(lambda: value(prometheus, reverts) == count + 1, f"{reverts} == {count + 1}")
    # the gate's metrics as it failed the start (verdict stalled, its phase, the seconds without
    # progress), scraped before the switch's own at its end, the revert's
    window = "[5m]"
    seen = {
        family: query(prometheus, f'max_over_time(sglang_pve_server_{family}{{server="{HUNG}"}}{window}) > 0')
        for family in ("verdict", "phase", "seconds_since_progress")
    }
    stalled = f'max_over_time(sglang_pve_server_verdict{{server="{HUNG}",verdict="stalled"}}{window})'
    assert value(prometheus, stalled) == 1, seen
    phase = f'max_over_time(sglang_pve_server_phase{{server="{HUNG}",phase="cuda_graph"}}{window})'
    assert value(prometheus, phase) == 1, seen
    silent = value(prometheus, f'max_over_time(sglang_pve_server_seconds_since_progress{{server="{HUNG}"}}{window})')
    assert silent is not None and silent >= STALL_TIMEOUT_S, seen
    assert value(prometheus, f'max_over_time(sglang_pve_server_ready{{server="{HUNG}"}}{window})') == 0
    diagnosis = f'sglang_pve_server_diagnosis_timestamp_seconds{{server="{HUNG}",kind="stall"}}'
    assert value(prometheus, diagnosis) is not None
    assert value(prometheus, 'sglang_pve_server_ready{server="baseline"}') == 1  # the revert's
    assert value(prometheus, 'sglang_pve_switches_total{result="reverted"}') == count + 1
