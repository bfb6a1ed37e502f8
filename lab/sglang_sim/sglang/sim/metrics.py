"""GET /metrics (with --enable-metrics): SGLang's Prometheus gauges, counters and histograms.

Names, help texts and buckets are SGLang's: sgl-project/sglang python/sglang/srt/metrics/collector.py
at commit 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538, SchedulerMetricsCollector (the gauges:
sglang:gen_throughput, sglang:num_running_reqs, sglang:spec_accept_length, ...) and
TokenizerMetricsCollector (the counters sglang:prompt_tokens_total, sglang:generation_tokens_total,
sglang:num_requests_total and the latency histograms, histograms.py). The subset is what the
simulator models; the label set (model_name only) is a simplification of SGLang's labels.
"""

from sglang.sim.tokenizer_manager import TokenizerManager

GAUGES = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("token_usage", "The token usage."),
    ("spec_accept_length", "The average acceptance length of speculative decoding."),
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("engine_startup_time", "The time taken for the engine to start up."),
    ("engine_load_weights_time", "The time taken for the engine to load weights."),
)
COUNTERS = (
    ("prompt_tokens", "Number of prefill tokens processed."),
    ("generation_tokens", "Number of generation tokens processed."),
    ("num_requests", "Number of requests processed."),
)


def _gauge_values(tm: TokenizerManager) -> dict:
    stat, info = tm.chans.stat, tm.scheduler_info
    verify_ct = stat("spec_verify_ct")
    return {
        "num_running_reqs": stat("num_running_reqs"),
        "num_queue_reqs": 0,
        "gen_throughput": stat("gen_throughput"),
        "token_usage": stat("token_usage"),
        "spec_accept_length": stat("spec_accept_tokens") / verify_ct if verify_ct else 0.0,
        "max_total_num_tokens": info["max_total_num_tokens"],
        "is_cuda_graph": 1.0 if tm.args.cuda_graph_enabled else 0.0,
        "engine_startup_time": info["startup_time"],
        "engine_load_weights_time": info["load_weights_time"],
    }


def render_metrics(tm: TokenizerManager) -> str:
    """The Prometheus text exposition of the server's metrics."""
    labels = f'{{model_name="{tm.args.served_model_name}"}}'
    values = _gauge_values(tm)
    lines = []
    for name, help_text in GAUGES:
        lines += [
            f"# HELP sglang:{name} {help_text}",
            f"# TYPE sglang:{name} gauge",
            f"sglang:{name}{labels} {float(values[name])}",
        ]
    for name, help_text in COUNTERS:
        lines += [
            f"# HELP sglang:{name}_total {help_text}",
            f"# TYPE sglang:{name}_total counter",
            f"sglang:{name}_total{labels} {tm.chans.stat(name)}",
        ]
    lines += tm.histograms.render(labels.strip("{}"))
    return "\n".join(lines) + "\n"
