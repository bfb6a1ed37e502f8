"""Render a host's status report (facts.status.ServerStatus) as the table `tasks/status.py` prints."""

from itertools import groupby

from sglang_pve.config.safe import printable


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


def _restarts(restarts: dict) -> str:
    """`1/3`: restarts of the current release within the window (watchdog and crash policy together) / the cap."""
    count = str(restarts.get("in_window", 0))
    return (
        f"{count}/{restarts['max']}" if "max" in restarts else count
    )  # no "max": an agent deployed before the crash policy


def _on_crash(restarts: dict) -> str:
    """The crash policy (sglang_pve/agent/crashes.py): `restart`, `restart at <time>` while one is pending, `off`."""
    policy = str(restarts.get("on_crash") or "-").split(" ")[0]
    return f"restart at {restarts['crash_restart_at']}" if restarts.get("crash_restart_at") else policy


def render(host: str, report: dict | None) -> str:
    if report is None:
        return f"{host}: not deployed yet (no lifecycle agent)"
    header = ("SERVER", "UNIT", "PHASE", "IN PHASE", "HEALTH", "RESTARTS", "ON CRASH", "VERDICT")
    rows = [header]
    for server in report["servers"]:
        state = server.get("state") or {}
        health = server.get("health") or {}
        group = server.get("group")
        rank = f" [{group['name']} rank {group['rank']}/{group['nnodes']}]" if group else ""
        rows.append(
            (
                server.get("server", "?") + rank,
                f"{state.get('ActiveState', '?')}/{state.get('SubState', '?')}",
                server.get("phase") or "-",
                _seconds(server.get("seconds_in_phase")),
                str(health.get("status") or health.get("error") or "-"),
                _restarts(server.get("restarts") or {}),
                _on_crash(server.get("restarts") or {}),
                server.get("verdict") or server.get("error", "?"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = [f"{host}:"] + [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows
    ]
    for server in report["servers"]:
        if server.get("last_log_line") and server.get("verdict") != "stopped":
            lines.append(f"  {server['server']} last log line: {server['last_log_line'][:200]}")
        if server.get("diagnosis"):
            lines.append(f"  {server['server']} diagnosis: {server['diagnosis']}")
    lines.append(f"  GPUs (driver {report.get('driver') or '?'}): {_gpus(report.get('gpus'), report.get('gpu_error'))}")
    foreign = [h for h in report.get("holders", []) if not h.get("ours")]
    for holder in foreign:
        lines.append(
            f"  foreign holder of {', '.join(holder['devices'])}: PID {holder['pid']} {holder['cmdline'][:120]}"
        )
    return "\n".join(printable(line) for line in lines)  # log and command lines come from the host


def _changed_files(record: dict, before: dict) -> list[str]:
    files, old = record["files"], before["files"]
    return sorted(
        p for p in files.keys() | old.keys() if files.get(p, {}).get("sha256") != old.get(p, {}).get("sha256")
    )


def release_change(record: dict, before: dict | None) -> str:
    """How a release differs from the one before it, in a few words."""
    if before is None:
        return "first release"
    parts = []
    for key, label in (("sglang_version", "SGLang"), ("active_server", "server"), ("nccl_profile", "NCCL profile")):
        if record.get(key) != before.get(key):
            parts.append(f"{label} {before.get(key)} -> {record.get(key)}")
    if record["lock"]["sha256"] != before["lock"]["sha256"] and record["sglang_version"] == before["sglang_version"]:
        parts.append("lock changed")
    changed = _changed_files(record, before)
    if changed:
        parts.append(
            f"{len(changed)} file(s): "
            + ", ".join(p.rsplit("/", 1)[-1] for p in changed[:4])
            + (", ..." if len(changed) > 4 else "")
        )
    return "; ".join(parts) or "same contents"


def render_release(host: str, report) -> str:
    """One line for tasks/status.py: the current release, its SGLang and what changed since the
    ready release before it."""
    current = report.current_record
    if current is None:
        return f"{host}: no release recorded yet"
    ready = [r for r in report.releases if r.get("status") == "ready" and r["id"] < current["id"]]
    before = ready[-1] if ready else None
    return printable(
        f"{host}: release {current['id']} (SGLang {current['sglang_version']}, "
        f"{current['active_server'] or 'no server'}, "
        f"NCCL {current['nccl_profile']}); vs {before['id'] if before else 'none'}: {release_change(current, before)}"
    )


def releases_table(host: str, report) -> str:
    """`tasks/rollback.py --data list=1`: every release, oldest first; * marks the one that runs."""
    header = ("", "RELEASE", "SGLANG", "SERVER", "NCCL", "STATUS", "BY", "COMMIT")
    rows = [header] + [
        tuple(
            printable(str(cell))  # release records are the host's: a cell can neither forge a row nor reorder one
            for cell in (
                "*" if r["id"] == report.current else ("<" if r["id"] == report.previous else ""),
                r["id"],
                r["sglang_version"],
                r["active_server"] or "-",
                r["nccl_profile"],
                r.get("status", "?"),
                r.get("user") or "?",
                r.get("commit") or "-",
            )
        )
        for r in report.releases
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"{host}: {len(report.releases)} release(s); * runs, < is where a rollback goes by default"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [printable(f"  {r['id']} failed: {r['failure']}") for r in report.releases if r.get("failure")]
    return "\n".join(lines)


def render_router(host: str, name: str, report: dict | None) -> str:
    """A router's health, its workers' states and its own metrics (facts.router.RouterStatus)."""
    if report is None:
        return f"{host}: router of {name}: not deployed yet (no lifecycle agent)"
    health = "ready" if report.get("ready") else "live, no healthy worker" if report.get("live") else "down"
    lines = [f"{host}: router of replica set {name} at {report.get('url')}: {health}"]
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    for worker in report.get("workers", []):
        load = worker.get("load")
        lines.append(
            f"  worker {worker['url']}: {'healthy' if worker.get('healthy') else 'unhealthy'}"
            + (f", load {load}" if load is not None else "")
        )
    for metric, value in sorted((report.get("metrics") or {}).items()):
        lines.append(f"  {metric} {value:g}")
    return "\n".join(printable(line) for line in lines)
