"""The tokenizer's latency histograms, as SGLang's TokenizerMetricsCollector keeps them
(sgl-project/sglang python/sglang/srt/metrics/collector.py, commit 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538):
sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds (each chunk's interval over
its new tokens) and sglang:e2e_request_latency_seconds, with that file's default buckets."""

import threading
from typing import Dict, List

BUCKETS = {
    "time_to_first_token_seconds": [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
    "inter_token_latency_seconds": [
        0.002,
        0.004,
        0.006,
        0.008,
        0.010,
        0.015,
        0.020,
        0.025,
        0.030,
        0.035,
        0.040,
        0.060,
        0.080,
        0.100,
        0.200,
        0.400,
        0.600,
        0.800,
        1.000,
        2.000,
        4.000,
        6.000,
        8.000,
    ],  # fmt: skip
    "e2e_request_latency_seconds": [
        0.1,
        0.2,
        0.4,
        0.6,
        0.8,
        1,
        2,
        4,
        6,
        8,
        10,
        20,
        40,
        60,
        80,
        100,
        200,
        400,
        600,
        1200,
        1800,
        2400,
    ],  # fmt: skip
}
HELP = {
    "time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
}


class Histograms:
    """Cumulative bucket counts, sums and counts per histogram (thread-safe: HTTP handler threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, List[int]] = {name: [0] * len(b) for name, b in BUCKETS.items()}
        self._sum = {name: 0.0 for name in BUCKETS}
        self._count = {name: 0 for name in BUCKETS}

    def observe(self, name: str, value: float, times: int = 1) -> None:
        with self._lock:
            for i, bound in enumerate(BUCKETS[name]):
                if value <= bound:
                    self._counts[name][i] += times
            self._sum[name] += value * times
            self._count[name] += times

    def render(self, labels: str) -> List[str]:
        """labels: `model_name="..."` (no braces)."""
        lines = []
        with self._lock:
            for name, bounds in BUCKETS.items():
                full = f"sglang:{name}"
                lines += [f"# HELP {full} {HELP[name]}", f"# TYPE {full} histogram"]
                for bound, count in zip(bounds, self._counts[name], strict=True):
                    lines.append(f'{full}_bucket{{{labels},le="{float(bound)}"}} {float(count)}')
                lines.append(f'{full}_bucket{{{labels},le="+Inf"}} {float(self._count[name])}')
                lines.append(f"{full}_count{{{labels}}} {float(self._count[name])}")
                lines.append(f"{full}_sum{{{labels}}} {self._sum[name]}")
        return lines
