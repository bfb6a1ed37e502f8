"""The phase classifier against realistic SGLang startup logs (v0.5.9 and HEAD spellings)."""

import re
import time

from sglang_pve.agent.phases import PhaseTracker, is_noise, parse_line, signal
from tests.unit.agent_support import BASELINE_V059, CONTEXT_LENGTH_CRASH, EAGLE3_HEAD


def phases_of(lines, speculative=False):
    tracker, seen = PhaseTracker(speculative), []
    for line in lines:
        for piece in re.split(r"[\r\n]", line):  # what the log follower hands out
            if piece.strip() and tracker.feed(piece):
                seen.append(tracker.phase)
    return tracker, seen


def test_v059_baseline_walks_every_phase_once_in_order():
    tracker, seen = phases_of(BASELINE_V059)
    assert seen == ["dist_init", "weights", "kv_cache", "cuda_graph", "http", "warmup", "ready"]
    assert tracker.ready and tracker.fatal is None


def test_late_rank_lines_never_move_the_phase_back():
    # BASELINE_V059 has TP1's "Load weight end" after TP0's "KV Cache is allocated".
    tracker, seen = phases_of(BASELINE_V059[:13])
    assert seen[-1] == "kv_cache" and tracker.phase == "kv_cache"


def test_head_eagle3_draft_is_entered_by_second_weight_load_and_by_draft_captures():
    tracker, seen = phases_of(EAGLE3_HEAD, speculative=True)
    assert seen == ["dist_init", "weights", "kv_cache", "draft", "cuda_graph", "draft", "http", "warmup", "ready"]


def test_v059_eagle3_order_target_graphs_then_draft():
    lines = BASELINE_V059[:17] + [
        "[2026-07-20 10:06:15 TP0] Load weight begin. avail mem=9.80 GB",
        "[2026-07-20 10:06:16 TP0] Load weight end. type=LlamaForCausalLMEagle3, avail mem=9.0 GB, mem usage=0.8 GB.",
        "[2026-07-20 10:06:17 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail mem=8.9 GB",
        "\rCapturing batches (bs=8 avail_mem=8.80 GB): 100%|##########| 52/52 [00:20<00:00]",
        "[2026-07-20 10:06:37 TP0] Capture draft cuda graph end. Time elapsed: 20.1 s. mem usage=0.1 GB. avail mem=8.8 GB.",
        "[2026-07-20 10:06:38 TP0] Capture draft extend cuda graph begin. This can take up to several minutes.",
        "[2026-07-20 10:06:48 TP0] max_total_num_tokens=912384, context_len=131072",
    ]
    tracker, seen = phases_of(lines, speculative=True)
    assert seen == ["dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http"]


def test_second_weight_load_of_one_rank_is_no_draft_without_speculative():
    lines = [
        "[2026-07-20 10:00:10 TP0] Load weight begin. avail mem=93 GB",
        "[2026-07-20 10:00:10 TP1] Load weight begin. avail mem=93 GB",
    ]
    assert phases_of(lines, speculative=True)[0].phase == "weights"  # two ranks, one load each
    assert phases_of(lines + lines[:1], speculative=False)[0].phase == "weights"
    assert phases_of(lines + lines[:1], speculative=True)[0].phase == "draft"


def test_both_capture_spellings_and_tqdm_lines_classify_as_cuda_graph():
    for message in (
        "Capture cuda graph begin. This can take up to several minutes. avail mem=10.87 GB",
        "Capture piecewise CUDA graph begin. avail mem=10 GB",
        "Capture target verify CUDA graph end. elapsed=3.2 s",
        "Capturing batches (bs=512 avail_mem=10.85 GB):  10%|#         | 5/52",
    ):
        tracker = PhaseTracker()
        tracker.feed("[2026-07-20 10:04:32 TP0] KV Cache is allocated. #tokens: 1, KV size: 1 GB")
        tracker.feed(f"[2026-07-20 10:04:33 TP0] {message}" if message.startswith("Capture ") else message)
        assert tracker.phase == "cuda_graph", message
    assert signal("Capture draft extend CUDA graph begin. backend=fa3") == "draft_graph"


def test_crash_reason_is_the_root_exception_line():
    tracker, _ = phases_of(BASELINE_V059[:13] + CONTEXT_LENGTH_CRASH, speculative=True)
    assert tracker.fatal.startswith("Scheduler hit an exception")
    assert tracker.reason.startswith("ValueError: Warning: Target model's context_length (262144) is greater than")
    assert tracker.phase == "draft"


def test_fatal_lines_each_recognised():
    for line in (
        "[2026-07-20 10:00:00] Received sigquit from a child process. It usually means the child failed.",
        "[2026-07-20 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "[2026-07-20 10:00:00 TP3] Scheduler watchdog timeout (self.watchdog_timeout=600, self.soft=False)",
        "[2026-07-20 10:00:00] Initialization failed. warmup error: Traceback (most recent call last):",
        "RuntimeError: Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 ...",
    ):
        tracker = PhaseTracker()
        tracker.feed(line)
        assert tracker.fatal, line
    for harmless in (
        "[2026-07-20 10:00:00 TP0] ValueError: this is a logged message, not a traceback",
        "Traceback (most recent call last):",  # alone: SGLang logs handled ones and goes on
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "INFO:     Started server process [12]",
        "/usr/lib/python3/dist-packages/x.py:1: UserWarning: something",
    ):
        tracker = PhaseTracker()
        tracker.feed(harmless)
        assert tracker.fatal is None, harmless


def test_nothing_after_ready_counts():
    tracker, _ = phases_of(BASELINE_V059 + ["Traceback (most recent call last):"])
    assert tracker.ready and tracker.fatal is None


def test_phase_since_comes_from_the_line_prefix():
    tracker = PhaseTracker()
    tracker.feed("[2026-07-20 10:00:10 TP0] Load weight begin. avail mem=93.46 GB")
    tracker.feed("\rMulti-thread loading shards:  50% Completed | 32/64")
    assert tracker.since == time.mktime(time.strptime("2026-07-20 10:00:10", "%Y-%m-%d %H:%M:%S"))
    line = parse_line("[2026-07-20 10:00:10 DP0 TP3] KV Cache is allocated.")
    assert (line.rank, line.message) == ("DP0 TP3", "KV Cache is allocated.")


def test_probe_noise_is_not_progress_but_real_work_is():
    assert is_noise(
        '[2026-07-20 10:00:00] INFO:     127.0.0.1:5 - "GET /health_generate HTTP/1.1" 503 Service Unavailable'
    )
    assert is_noise('[2026-07-20 10:00:00] INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK')
    assert is_noise(
        "[2026-07-20 10:00:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds."
    )
    assert is_noise(
        "[2026-07-20 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.01, "
    )
    assert not is_noise(
        "[2026-07-20 10:00:00 TP0] Decode batch, #running-req: 12, #token: 40211, token usage: 0.04, "
        "accept len: 2.85, cuda graph: True, gen throughput (token/s): 88.13, #queue-req: 0"
    )
    assert not is_noise('[2026-07-20 10:00:00] INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert not is_noise("[2026-07-20 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, ")


def test_load_weight_end_starts_kv_cache_which_logs_nothing_when_it_begins():
    tracker = PhaseTracker()
    for line in BASELINE_V059[:10]:
        tracker.feed(line)
    assert tracker.phase == "kv_cache"  # after TP0's `Load weight end`, before `KV Cache is allocated`
