"""The agent's state as Prometheus metrics, for node_exporter's textfile collector.

`export` renders status.collect's report (the same verdicts `status` prints) and the switch
history (switch_history.py) in the text exposition format and writes it atomically (temp file
+ rename, as node_exporter's README.textfile asks) to TEXTFILE_DIR/sglang-pve.prom, readable by
the exporter's user. It runs on the watchdog's probes (every INTERVAL_S), from the readiness gate while a start
waits (every INTERVAL_S, and once at its failure) and at the end of every switch; between them
the file keeps its last values, and node_exporter's node_textfile_mtime_seconds tells its age.

Per server (label server=NAME):
  sglang_pve_server_ready                 1 when the verdict is ready, else 0
  sglang_pve_server_verdict{verdict}      1 for the verdict's kind (VERDICTS), 0 for the others
  sglang_pve_server_phase{phase}          1 for the phase it is in (PHASES), 0 for the others
  sglang_pve_server_phase_seconds         seconds in that phase
  sglang_pve_server_seconds_since_progress
  sglang_pve_server_restarts_total        restarts of the current release (restarts.py)
  sglang_pve_server_restarts_in_window, sglang_pve_server_restarts_max
  sglang_pve_server_diagnosis_timestamp_seconds{kind}   the newest diagnosis, by its kind
Per host: sglang_pve_gpu_memory_used_bytes{gpu}, sglang_pve_gpu_memory_total_bytes{gpu},
sglang_pve_gpu_holders{ours}, sglang_pve_release_info{release,server,sglang_version},
sglang_pve_switches_total{result}, sglang_pve_switch_reverts_total,
sglang_pve_switch_last_duration_seconds{step}, sglang_pve_switch_last_timestamp_seconds.
Names follow https://prometheus.io/docs/practices/naming/ (checked by `promtool check metrics`).
"""

import os
from collections.abc import Callable, Iterable

from sglang_pve.agent import contract, overrides, phases, state, status, switch_history
from sglang_pve.agent.release_store import Store
from sglang_pve.agent.state import Record

FILE_NAME = "sglang-pve.prom"  # node_exporter reads *.prom only: the temp file beside it is ignored
VERDICTS = ("ready", "starting", "stalled", "zombie", "restarting", "failed", "stopping", "stopped")
PHASES = ("prestart", *phases.PHASES[:-1], phases.GATE, phases.PHASES[-1])
MIB = 1 << 20
INTERVAL_S = 15.0  # the watchdog's: Prometheus' usual scrape interval (a status.collect costs ~0.1-5 s)

Sample = tuple[dict[str, str], float]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    rows = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        label_text = ",".join(f'{key}="{_escape(text)}"' for key, text in labels.items())
        number = repr(float(value))  # exact: no exponent rounding of byte counts
        rows.append(f"{name}{{{label_text}}} {number}" if label_text else f"{name} {number}")
    return rows


def verdict_kind(verdict: str | None) -> str:
    """`starting (weights, 12s)` -> starting; an unknown text counts as failed."""
    word = (verdict or "stopped").split(" ", 1)[0].rstrip(":")
    return word if word in VERDICTS else "failed"


def diagnosis_kind(path: str) -> str:
    """diagnoses_dir/NAME-<UTC time>-<kind>.json (diagnosis.py) -> kind."""
    return os.path.basename(path).removesuffix(".json").rsplit("-", 1)[-1]


def _servers(servers: list[Record]) -> list[str]:
    good = [s for s in servers if "server" in s]  # a spec that does not load has no state

    def each(samples_of: Callable[[Record], Iterable[Sample]]) -> list[Sample]:
        return [sample for s in good for sample in samples_of(s)]

    def one(key: str) -> Callable[[Record], Iterable[Sample]]:
        return lambda s: [({"server": s["server"]}, s[key])] if s.get(key) is not None else []

    def diagnosis_time(s: Record) -> Iterable[Sample]:
        path = s.get("diagnosis")
        if not path:
            return []
        try:
            return [({"server": s["server"], "kind": diagnosis_kind(path)}, os.path.getmtime(path))]
        except OSError:
            return []

    kinds = {s["server"]: verdict_kind(s.get("verdict")) for s in good}
    return [
        *family(
            "sglang_pve_server_ready",
            "gauge",
            "1 when the server's verdict is ready, else 0.",
            each(lambda s: [({"server": s["server"]}, kinds[s["server"]] == "ready")]),
        ),
        *family(
            "sglang_pve_server_verdict",
            "gauge",
            "1 for the kind of the server's verdict (as `status` says it), 0 for the others.",
            each(lambda s: [({"server": s["server"], "verdict": v}, kinds[s["server"]] == v) for v in VERDICTS]),
        ),
        *family(
            "sglang_pve_server_phase",
            "gauge",
            "1 for the startup phase the server is in (ready after its gate), 0 for the others.",
            each(lambda s: [({"server": s["server"], "phase": p}, s.get("phase") == p) for p in PHASES]),
        ),
        *family(
            "sglang_pve_server_phase_seconds", "gauge", "Seconds in the current phase.", each(one("seconds_in_phase"))
        ),
        *family(
            "sglang_pve_server_seconds_since_progress",
            "gauge",
            "Seconds since the server's last real output (probes excluded).",
            each(one("seconds_since_progress")),
        ),
        *family(
            "sglang_pve_server_restarts_total",
            "counter",
            "Restarts of the current release by the watchdog and the crash policy.",
            each(lambda s: [({"server": s["server"]}, s["restarts"]["total"])]),
        ),
        *family(
            "sglang_pve_server_restarts_in_window",
            "gauge",
            "Restarts within the restart window.",
            each(lambda s: [({"server": s["server"]}, s["restarts"]["in_window"])]),
        ),
        *family(
            "sglang_pve_server_restarts_max",
            "gauge",
            "The restart cap within the window.",
            each(lambda s: [({"server": s["server"]}, s["restarts"]["max"])]),
        ),
        *family(
            "sglang_pve_server_diagnosis_timestamp_seconds",
            "gauge",
            "When the server's newest failure diagnosis was written, labelled by its kind.",
            each(diagnosis_time),
        ),
    ]


def _host(report: Record, release: Record | None, history: Record) -> list[str]:
    gpus = report.get("gpus") or []
    used = [(str(g["index"]), g["memory_used_mib"]) for g in gpus if g["memory_used_mib"] is not None]
    total = [(str(g["index"]), g["memory_total_mib"]) for g in gpus if g["memory_total_mib"] is not None]
    holders = report.get("holders") or []
    last = history.get("last") or {}
    return [
        *family(
            "sglang_pve_gpu_memory_used_bytes",
            "gauge",
            "GPU memory in use (nvidia-smi).",
            [({"gpu": index}, mib * MIB) for index, mib in used],
        ),
        *family(
            "sglang_pve_gpu_memory_total_bytes",
            "gauge",
            "GPU memory in all (nvidia-smi).",
            [({"gpu": index}, mib * MIB) for index, mib in total],
        ),
        *family(
            "sglang_pve_gpu_holders",
            "gauge",
            "Processes holding a GPU device open: ours (a unit of this toolkit) or not.",
            [({"ours": o}, sum(1 for h in holders if bool(h["ours"]) == (o == "true"))) for o in ("true", "false")],
        ),
        *family(
            "sglang_pve_release_info",
            "gauge",
            "The current release (always 1).",
            []
            if release is None
            else [
                (
                    {
                        "release": release["id"],
                        "server": release.get("active_server") or "",
                        "sglang_version": release.get("sglang_version") or "",
                    },
                    1,
                )
            ],
        ),
        *family(
            "sglang_pve_switches_total",
            "counter",
            "Switches by result: ready, reverted (the previous release runs again), failed (no revert).",
            [({"result": r}, history["counts"].get(r, 0)) for r in switch_history.RESULTS],
        ),
        *family(
            "sglang_pve_switch_reverts_total",
            "counter",
            "Switches that failed and were reverted.",
            [({}, history["counts"].get("reverted", 0))],
        ),
        *family(
            "sglang_pve_switch_last_duration_seconds",
            "gauge",
            "The last switch's seconds per step (stop, gpus_free, start, total).",
            [({"step": step}, seconds) for step, seconds in sorted((last.get("timings") or {}).items())],
        ),
        *family(
            "sglang_pve_switch_last_timestamp_seconds",
            "gauge",
            "When the last switch ended, labelled by its result.",
            [({"result": last["result"]}, last["time"])] if last else [],
        ),
    ]


def render(report: Record, release: Record | None, history: Record) -> str:
    return "\n".join(_servers(report["servers"]) + _host(report, release, history)) + "\n"


def collect(spec_dir: str, releases_dir: str) -> str:
    store = Store(releases_dir)
    return render(status.collect(spec_dir), store.current(), switch_history.read(releases_dir))


def export(spec_dir: str = contract.SERVERS_DIR, releases_dir: str | None = None) -> str | None:
    """Write the metrics file; None, or why it could not (metrics never fail what calls them).
    No textfile directory (node_exporter not installed): nothing is written, and the directory is
    not made either (root's 0750 would keep the exporter's user out of a later package's own)."""
    directory = overrides.textfile_dir()
    if not os.path.isdir(directory):
        return None
    try:
        text = collect(spec_dir, releases_dir or overrides.releases_dir())
        state.write_atomic(os.path.join(directory, FILE_NAME), text, mode=0o644)
    except Exception as error:  # noqa: BLE001 - advisory: a watchdog or switch goes on without metrics
        return f"metrics not written: {type(error).__name__}: {error}"
    return None
