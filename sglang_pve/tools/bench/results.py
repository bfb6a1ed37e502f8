"""Benchmark results on the controller: the JSONL history, the comparison table, the change
against an earlier run.

One history line per configuration per run (`<results dir>/history.jsonl`, appended):

    {"run_id": "20261130T120000Z-pve1-sglang", "time": "2026-11-30T12:00:00Z", "host": "pve1-sglang",
     "configuration": "eagle3-3step", "status": "ok" | "failed", "diagnosis": null | "stalled in ...",
     "sglang_version": "0.5.16...", "nccl_profile": "pcie-tuned", "release": null | "<id>",
     "plan": {...}, "startup": {"phases": {"weights": 301.5, ...}, "total_s": 343.8, "switch_s": 350.2},
     "single_stream": {bench_serving metrics}, "sweep": [{...}, ...], "overhead_s": 1.9}

A configuration that failed to start has its row, with the diagnosis, never a gap.
"""

import json
from pathlib import Path

HISTORY = "history.jsonl"
BASELINE = "baseline"


def append(results_dir: Path, records: list[dict]) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / HISTORY
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    return path


def load(results_dir: Path) -> list[dict]:
    path = results_dir / HISTORY
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_records(history: list[dict], run_id: str, host: str) -> list[dict]:
    return [r for r in history if r["run_id"] == run_id and r["host"] == host]


def earlier_run(history: list[dict], run_id: str, host: str, wanted: str) -> str | None:
    """The run `wanted` names for `host`: an id, or "previous" (the latest before `run_id`)."""
    ids = list(dict.fromkeys(r["run_id"] for r in history if r["host"] == host and r["run_id"] != run_id))
    if wanted == "previous":
        return ids[-1] if ids else None
    return wanted if wanted in ids else None


def _tok_s(record: dict) -> float | None:
    return (record.get("single_stream") or {}).get("output_throughput") if record["status"] == "ok" else None


def _fmt(value, spec: str = ".1f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


COLUMNS = (
    "configuration",
    "status",
    "output tok/s",
    "x baseline",
    "TPOT ms",
    "TTFT ms",
    "ITL p50/p90/p99 ms",
    "accept (server/req)",
    "startup s",
    "diagnosis",
)


def table_rows(records: list[dict]) -> list[tuple]:
    """One row per configuration; ratios to the baseline's output tok/s when it was measured."""
    base = next((_tok_s(r) for r in records if r["configuration"] == BASELINE), None)
    rows = []
    for r in records:
        m = r.get("single_stream") or {}
        tok_s = _tok_s(r)
        accept = "/".join(_fmt(m.get(k), ".2f") for k in ("accept_length", "request_accept_length"))
        rows.append(
            (
                r["configuration"],
                r["status"],
                _fmt(tok_s),
                _fmt(tok_s / base if tok_s and base else None, ".3f"),
                _fmt(m.get("mean_tpot_ms"), ".2f"),
                _fmt(m.get("mean_ttft_ms")),
                "/".join(_fmt(m.get(f"{s}_itl_ms"), ".2f") for s in ("median", "p90", "p99")) if m else "-",
                accept if m else "-",
                _fmt((r.get("startup") or {}).get("total_s")),
                r.get("diagnosis") or "",
            )
        )
    return rows


def ratios(records: list[dict]) -> dict:
    """configuration -> output tok/s relative to the baseline (only measured ones)."""
    base = next((_tok_s(r) for r in records if r["configuration"] == BASELINE), None)
    return {r["configuration"]: tok_s / base for r in records if base and (tok_s := _tok_s(r))}


def _sweep_rows(records: list[dict]) -> list[tuple]:
    return [
        (
            r["configuration"],
            s["concurrency"],
            f"{s['output_throughput']:.1f}",
            f"{s['mean_tpot_ms']:.2f}",
            f"{s['mean_ttft_ms']:.1f}",
        )
        for r in records
        for s in r.get("sweep") or []
    ]


SWEEP_COLUMNS = ("configuration", "concurrency", "output tok/s", "TPOT ms", "TTFT ms")


def render_text(records: list[dict]) -> str:
    rows = [COLUMNS, *table_rows(records)]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + str(row[-1])
        for row in rows
    ]
    sweep = _sweep_rows(records)
    if sweep:
        lines += ["", "  ".join(SWEEP_COLUMNS)] + [
            "  ".join(str(c).ljust(len(h)) for c, h in zip(row, SWEEP_COLUMNS, strict=True)) for row in sweep
        ]
    return "\n".join(line.rstrip() for line in lines)


def render_markdown(records: list[dict], title: str) -> str:
    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = [f"# {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table_rows(records)]
    first = records[0] if records else {}
    plan = first.get("plan", {})
    lines += [
        "",
        f"SGLang {first.get('sglang_version', '?')}, NCCL profile {first.get('nccl_profile', '?')}, "
        f"release {first.get('release') or '-'}; {plan.get('num_prompts')} prompts of {plan.get('input_words')} "
        f"words, {plan.get('output_len')} output tokens, concurrency 1, seed {plan.get('seed')}. "
        "Metrics as SGLang's bench_serving defines them (README: Benchmark).",
    ]
    sweep = _sweep_rows(records)
    if sweep:
        lines += ["", "| " + " | ".join(SWEEP_COLUMNS) + " |", "|" + "---|" * len(SWEEP_COLUMNS)]
        lines += ["| " + " | ".join(map(str, row)) + " |" for row in sweep]
    return "\n".join(lines) + "\n"


def render_change(records: list[dict], earlier: list[dict]) -> str:
    """Output tok/s and TPOT per configuration against an earlier run."""
    before = {r["configuration"]: r for r in earlier}
    run_id = earlier[0]["run_id"] if earlier else "?"
    lines = [f"change against {run_id}:", f"{'configuration':<20} {'output tok/s':>24} {'TPOT ms':>22}"]
    for r in records:
        old = before.get(r["configuration"])
        new_t, old_t = _tok_s(r), _tok_s(old) if old else None
        new_p = (r.get("single_stream") or {}).get("mean_tpot_ms") if new_t else None
        old_p = (old.get("single_stream") or {}).get("mean_tpot_ms") if old and old_t else None
        delta = f" ({(new_t / old_t - 1) * 100:+.1f}%)" if new_t and old_t else ""
        lines.append(
            f"{r['configuration']:<20} {_fmt(old_t):>8} -> {_fmt(new_t):>6}{delta:>9} "
            f"{_fmt(old_p, '.2f'):>8} -> {_fmt(new_p, '.2f'):>7}"
        )
    return "\n".join(lines)
