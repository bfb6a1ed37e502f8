"""Raw client timings -> the metrics of SGLang's bench_serving, with its definitions.

(notes/sglang.md section 5; `calculate_metrics` in sglang.benchmark.serving)

- output throughput (tok/s) = sum of output tokens of the successful requests / the run's wall
  duration (first request sent to last response done);
- TTFT = time from sending a request to its first streamed chunk with text;
- ITL = gap between two chunks spread evenly over the tokens the later one carries, pooled
  over all requests;
- TPOT of a request = (latency - TTFT) / (output tokens - 1), for requests with > 1 token;
- mean / median / std / p90 / p95 / p99 of each (numpy's linear percentile), in ms;
- accept length: `internal_states[0].avg_spec_accept_length` of GET /server_info after the run
  (cumulative since the server started: the bench starts each configuration fresh) and, per
  request, `meta_info.spec_accept_length`, averaged here over the measured requests;
- the run's noise (not bench_serving's): `std_request_output_throughput`, the population standard
  deviation of each successful request's output tokens / latency (tok/s), the spread of its repeated
  measurements; the promote (promote.py) and the alert on SGLang's own throughput (monitoring/alerts.yml)
  count a difference within it as none.
"""

import math
import statistics

PERCENTILES = (90, 95, 99)


def percentile(values: list, q: float) -> float:
    """numpy.percentile's default (linear interpolation between closest ranks)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(values_s: list, name: str) -> dict:
    """mean/median/std/p90/p95/p99 of `values_s` (seconds) as `<stat>_<name>_ms`."""
    ms = [v * 1000 for v in values_s]
    out = {
        f"mean_{name}_ms": statistics.fmean(ms) if ms else 0.0,
        f"median_{name}_ms": statistics.median(ms) if ms else 0.0,
        f"std_{name}_ms": statistics.pstdev(ms) if ms else 0.0,  # numpy's std: population
    }
    out.update({f"p{q}_{name}_ms": percentile(ms, q) for q in PERCENTILES})
    return out


def server_accept_length(server_info: dict | None) -> float | None:
    states = (server_info or {}).get("internal_states") or [{}]
    return states[0].get("avg_spec_accept_length")


def run_metrics(run: dict, server_info: dict | None = None) -> dict:
    """bench_serving's summary of one run (one concurrency level)."""
    ok = [r for r in run["requests"] if not r.get("error")]
    output = sum(r["output_len"] for r in ok)
    duration = run["duration_s"]
    tpots = [(r["latency"] - r["ttft"]) / (r["output_len"] - 1) for r in ok if r["output_len"] > 1]
    accept = [r["spec_accept_length"] for r in ok if r.get("spec_accept_length") is not None]
    rates = [r["output_len"] / r["latency"] for r in ok if r["latency"] > 0]
    metrics = {
        "concurrency": run["concurrency"],
        "completed": len(ok),
        "failed": len(run["requests"]) - len(ok),
        "duration_s": duration,
        "total_output_tokens": output,
        "total_input_tokens": sum(r.get("prompt_tokens") or 0 for r in ok),
        "output_throughput": output / duration if duration > 0 else 0.0,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "std_request_output_throughput": statistics.pstdev(rates) if rates else 0.0,
        "accept_length": server_accept_length(server_info),
        "request_accept_length": statistics.fmean(accept) if accept else None,
        "errors": sorted({r["error"] for r in run["requests"] if r.get("error")}),
    }
    metrics.update(distribution([r["ttft"] for r in ok], "ttft"))
    metrics.update(distribution(tpots, "tpot"))
    metrics.update(distribution([gap for r in ok for gap in r["itl"]], "itl"))
    metrics.update(distribution([r["latency"] for r in ok], "e2e_latency"))
    return metrics
