"""Render a host's status report (facts.status.ServerStatus) as the table `tasks/status.py` prints."""

from itertools import groupby


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    value = int(value)
    return f"{value // 3600}h{value % 3600 // 60:02d}m" if value >= 3600 else f"{value // 60}m{value % 60:02d}s"


def _numbers(gpu: dict) -> tuple:
    return gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["utilization_pct"]


def _gpus(gpus: list[dict] | None, error: str | None) -> str:
    """Runs of GPUs with the same numbers collapse: `0-7 87026/97887 MiB 0%`."""
    if gpus is None:
        return f"unavailable ({error})" if error else "no nvidia-smi"
    parts = []
    for (used, total, util), run in groupby(gpus, key=_numbers):
        indexes = [g["index"] for g in run]
        label = str(indexes[0]) if len(indexes) == 1 else f"{indexes[0]}-{indexes[-1]}"
        parts.append(f"{label}: {used}/{total} MiB {util}%")
    return ", ".join(parts) or "none"


def render(host: str, report: dict | None) -> str:
    if report is None:
        return f"{host}: not deployed yet (no lifecycle agent)"
    header = ("SERVER", "UNIT", "PHASE", "IN PHASE", "HEALTH", "RESTARTS", "VERDICT")
    rows = [header]
    for server in report["servers"]:
        state = server.get("state") or {}
        health = server.get("health") or {}
        rows.append((
            server.get("server", "?"),
            f"{state.get('ActiveState', '?')}/{state.get('SubState', '?')}",
            server.get("phase") or "-",
            _seconds(server.get("seconds_in_phase")),
            str(health.get("status") or health.get("error") or "-"),
            str((server.get("restarts") or {}).get("in_window", 0)),
            server.get("verdict") or server.get("error", "?"),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = [f"{host}:"] + ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows]
    for server in report["servers"]:
        if server.get("last_log_line") and server.get("verdict") != "stopped":
            lines.append(f"  {server['server']} last log line: {server['last_log_line'][:200]}")
        if server.get("diagnosis"):
            lines.append(f"  {server['server']} diagnosis: {server['diagnosis']}")
    lines.append(f"  GPUs (driver {report.get('driver') or '?'}): {_gpus(report.get('gpus'), report.get('gpu_error'))}")
    foreign = [h for h in report.get("holders", []) if not h.get("ours")]
    for holder in foreign:
        lines.append(f"  foreign holder of {', '.join(holder['devices'])}: PID {holder['pid']} {holder['cmdline'][:120]}")
    return "\n".join(lines)
