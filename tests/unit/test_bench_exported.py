"""The last bench's figures for operations: the run's noise (its requests' spread) and each
configuration's newest success as node_exporter textfile metrics that `promtool check metrics` accepts."""

import shutil
import subprocess

import pytest

from sglang_pve.tools.bench import exported, metrics
from tests.unit.bench_support import row

PROMTOOL = shutil.which("promtool")


def test_the_noise_is_the_spread_of_the_requests_own_rates():
    requests = [
        {"ttft": 0.1, "latency": latency, "itl": [], "output_len": 100, "prompt_tokens": 1, "error": None}
        for latency in (1.0, 1.25)
    ]
    m = metrics.run_metrics({"concurrency": 1, "duration_s": 2.3, "requests": requests})
    assert m["std_request_output_throughput"] == pytest.approx(10.0)  # 100 and 80 tok/s: population std


def test_the_exported_figures_are_each_configurations_newest_success():
    history = [
        row("baseline", 80.0, when="2026-12-01T20:00:00Z"),
        row("eagle3-2step", 94.0, 1.5, when="2026-12-01T20:01:00Z"),
        row("baseline", 82.5, 0.25, when="2026-12-01T21:00:00Z"),
        row("eagle3-2step", None, status="failed", when="2026-12-01T21:01:00Z"),  # keeps 20:01's figures
        {**row("baseline", 1.0), "host": "sglang2"},
    ]
    text = exported.render(exported.latest(history, "sglang1"))
    assert 'sglang_pve_bench_decode_tokens_per_second{server="baseline"} 82.5' in text
    assert 'sglang_pve_bench_decode_tokens_per_second{server="eagle3-2step"} 94.0' in text
    assert 'sglang_pve_bench_decode_noise_tokens_per_second{server="eagle3-2step"} 1.5' in text
    assert 'sglang_pve_bench_timestamp_seconds{server="baseline"} 1796158800.0' in text  # 2026-12-01T21:00:00Z


needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: apt-get install prometheus")


def _check(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


@needs_promtool
@pytest.mark.parametrize("history", [[row("baseline", 82.5)], []], ids=["measured", "never"])
def test_promtool_finds_no_problem_in_the_bench_metrics(history):
    done = _check(exported.render(exported.latest(history, "sglang1")))
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr


@needs_promtool
def test_promtool_fails_a_gauge_named_as_a_counter():
    name = "sglang_pve_bench_decode_tokens_per_second"
    text = exported.render(exported.latest([row("baseline", 82.5)], "sglang1"))
    done = _check(text.replace(f"{name} ", f"{name}_total ").replace(f"{name}{{", f"{name}_total{{"))
    assert done.returncode != 0 and "_total" in done.stdout + done.stderr
