"""Bench history rows for the unit tests of the bench's verdicts (sglang_pve/tools/bench/results.py
documents the row)."""


def row(name: str, tok_s: float | None, noise: float = 0.5, status: str = "ok", when="2026-12-01T21:00:00Z") -> dict:
    single = None if tok_s is None else {"output_throughput": tok_s, "std_request_output_throughput": noise}
    return {
        "run_id": "20261201T210000Z-sglang1",
        "time": when,
        "host": "sglang1",
        "configuration": name,
        "status": status,
        "diagnosis": None if status == "ok" else "stalled in cuda_graph for 10s",
        "single_stream": single,
    }
