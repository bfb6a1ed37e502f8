"""The classifier follows real SGLang logs (excerpts posted publicly; their sources are in
tests/unit/fixtures/sglang_logs/SOURCES.md): every phase entered in order, nothing moved back by
late ranks, no crash from warnings or logged errors, the crash named where there is one."""

from pathlib import Path

import pytest

from sglang_pve.agent import logfollow, phases
from sglang_pve.agent.phases import PhaseTracker

LOGS = Path(__file__).resolve().parent / "fixtures" / "sglang_logs"

# file -> (speculative, phases entered in order, fatal line start or None)
EXPECTED = {
    "llama8b-tp1-2025-12.log": (False, ["dist_init", "weights"], None),
    "gemma3-tp1-2025-03.log": (False, ["kv_cache", "cuda_graph"], None),
    "deepseek-r1-mla-tp8-2025-03.log": (False, ["cuda_graph", "http"], None),
    "dp4-tp2-2025-03.log": (False, ["cuda_graph", "http"], None),
    "tp2-capture-2025-11.log": (False, ["cuda_graph"], None),
    "deepseek-v3.2-mla-tp2-2025-12.log": (False, ["kv_cache"], None),
    "eagle-tp8-2025-09.log": (True, ["cuda_graph", "draft"], None),
    "deepseek-r1-mla-crash-capture-2025-04.log": (False, [], "Scheduler hit an exception: Traceback"),
    "deepseek-v2-lite-mla-crash-2024-12.log": (False, [], "Scheduler hit an exception: Traceback"),
    "serving-2025-02.log": (False, ["warmup"], None),
    "serving-2026-05.log": (False, ["warmup"], None),
}


def lines_of(name: str) -> list:
    """As the agent reads them: through the follower, which splits on \\r and \\n."""
    follower = logfollow.LogFollower(str(LOGS / name), 0)
    lines = []
    while (update := follower.poll()).grew:
        lines += update.lines
    return lines


def test_every_fixture_has_an_expectation_and_a_source():
    sources = (LOGS / "SOURCES.md").read_text()
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)
    assert all(f"`{name}`" in sources for name in EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_phases_in_order_and_crash_named(name):
    speculative, expected, fatal = EXPECTED[name]
    tracker = PhaseTracker(speculative)
    seen = [phase for line in lines_of(name) if (phase := tracker.feed(line))]
    assert seen == expected
    if fatal:
        assert tracker.fatal.startswith(fatal) and tracker.reason.startswith(fatal)
    else:
        assert tracker.fatal is None, tracker.fatal


def test_serving_under_load_progress_is_the_schedulers_lines_not_the_access_lines():
    lines = lines_of("serving-2026-05.log")
    progress = [line for line in lines if phases.is_progress(line)]
    assert len(progress) == 3 and all("Prefill batch" in line for line in progress)
    assert sum(phases.is_access(line) for line in lines) == 3
