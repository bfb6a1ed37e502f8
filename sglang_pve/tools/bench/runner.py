"""One benchmark run on one host (the python.call of tasks/bench.py, at execution time).

For each configuration: a fresh start through the agent's switch in its transient mode (stop what
runs, GPUs verified free, start, readiness gate, and what ran before again when the gate fails;
no release recorded: releases.transient in deploy/operations/releases.py), then the client on
the target (agent/bench_client.py): warm-up, the single-stream decode run, the optional
concurrency sweep. The configuration that ran before is started again at the end the same way,
in a `finally`, also when a configuration fails, the client fails, or the run is interrupted:
SIGINT/SIGTERM on the controller kill this greenlet with BenchInterrupted at whatever it waits
for while it measures, the finally block restores (once a switch under way on the host ended: one
at a time), and the run fails; a signal during the restore or the promote waits for it to end
(_Interrupts). Results (partial ones too) go to the history, the table, the markdown file, the
chart and the host's textfile metrics (exported.py). With promote=1 and a winner (promote.py), the
winner's switch (a release, its gate, the agent's revert to the previous release) takes the
restore's place, and once its gate passed the winner is written for the next deploy.
"""

import json
import signal
import time
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand

from sglang_pve.agent import bench_client as client
from sglang_pve.agent import systemd
from sglang_pve.config.safe import printable, printable_tree
from sglang_pve.deploy import paths, rollout
from sglang_pve.deploy.operations import releases
from sglang_pve.deploy.progress import Watch, run_followed
from sglang_pve.tools import host_files
from sglang_pve.tools.bench import chart, exported, metrics, promote, results
from sglang_pve.tools.bench.progress import client_watch, starting_watch

REMOTE_DIR = f"{paths.STATE_DIR}/bench"
MARK = paths.BENCH_MARK  # under REMOTE_DIR: a bench in progress (agent/contract.py says who reads it)
CLIENT = f"{REMOTE_DIR}/bench-client.py"
TIMINGS = "switch-timings "  # the switch's last line (agent/switch.py)


class BenchInterrupted(Exception):
    """SIGINT or SIGTERM reached the controller during the benchmark."""


class PromoteFailed(Exception):
    """promote=1: the winner failed its gate (the agent reverted the switch)."""


class RouterFailed(Exception):
    """A replica's bench: it could not leave its router (nothing was started), or come back."""


@dataclass(frozen=True)
class Job:
    """What tasks/bench.py decided at load time, for one host."""

    run_id: str
    configs: list[str]
    endpoints: dict  # configuration -> (host, port) as seen on the target
    all_servers: list[str]
    plan: dict  # prompts, output_len, warmup, num_prompts, concurrency, seed, input_words
    nccl_profile: str
    sglang_version: str
    results_dir: Path
    lease: str  # the token of this run's deploy lock (the bench task holds it)
    compare: str | None = None
    release: str | None = None  # the host's current release (the Releases fact, read once per run)
    api_key: bool = False  # the servers want sglang_secrets.api-key: the client reads it on the target
    promotions: dict = field(default_factory=dict)  # promote=1: configuration -> its switch (releases.switch_to)
    active: str | None = None  # the current release's configuration (what a promoted one must beat)
    promote_by: int = 1  # the concurrency level whose output tok/s judges the winner (1: single-stream)
    project_dir: Path = Path(".")  # where group_data/bench_promoted.yml goes
    replica_set: str | None = None  # a replica's bench: its set (out of the set's router while it runs)
    members: tuple[str, ...] = ()  # ... and the set's members (short names): a winner is the set's
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Start:
    """One transient switch as the benchmark sees it."""

    server: str | None
    ok: bool
    seconds: float  # the switch's wall time on the controller, less the stop
    stop_seconds: float  # the agent's stop of what ran (SGLang drains) and GPUs verified free
    record: dict  # the agent's status record of this start (phases, verdict, diagnosis), {} if none
    lines: list[str]  # the agent's output

    @property
    def diagnosis(self) -> str | None:
        if self.ok:
            return None
        verdict = self.record.get("verdict") or ""
        if verdict.startswith("failed: "):
            return verdict.removeprefix("failed: ")
        said = [line for line in self.lines if TIMINGS not in line]
        failed = [
            line.split(" failed: ", 1)[1] for line in said if "transient switch to" in line and " failed: " in line
        ]
        return (failed or said[-1:] or ["the start failed and the agent said nothing (see the unit's journal)"])[0]


def _say(host, text: str) -> None:
    logger.info(f"{host.print_prefix}bench: {text}")


def run(job: Job) -> None:
    from pyinfra import host

    host.run_shell_command(StringCommand("mkdir", "-p", "-m", "700", REMOTE_DIR), print_output=False)
    dead = _dead_bench(host)
    if dead is not None:  # this run holds the deploy lock: the bench that wrote it is gone (SIGKILL, OOM)
        previous = dead.get("before")
        _say(host, f"bench run {dead.get('run_id')} died mid-run: {previous or 'nothing'} ran before it")
        if _restore(host, previous, job.lease):
            _unmark(host)
    else:
        previous = _running_now(host, job.all_servers)
    _say(
        host,
        f"run {job.run_id}: {len(job.configs)} configuration(s): {', '.join(job.configs)}; "
        f"running now: {previous or 'none'} (started again at the end"
        + (", unless a winner is promoted)" if job.promotions else ")"),
    )
    records: list[dict] = []
    measured_all = False
    interrupts = _Interrupts.enter(gevent.getcurrent(), host)
    try:
        routed = _leave(host, job)  # before the mark: nothing was started when it fails
    except BaseException:
        interrupts.leave()
        raise
    joined = True
    try:
        _mark(host, job.run_id, previous)  # before the first start: a SIGKILL here runs no finally
        host.put_file(BytesIO(Path(client.__file__).read_bytes()), CLIENT, print_output=False)
        for index, name in enumerate(job.configs, 1):
            records.append(_measure(host, job, name, f"{index}/{len(job.configs)}"))
        measured_all = True
    except BenchInterrupted as interrupt:
        _say(host, f"interrupted by {interrupt}")
        raise
    finally:
        interrupts.settling = True  # from here a signal waits: a restore or promote cut short is worse
        try:
            verdict = promote.decide(records, job.active, job.promote_by) if measured_all and job.promotions else None
            if verdict is not None and verdict.winner is not None:
                # the winner instead of the restore: one start less (a cold 1T start is 30-90 min); when
                # its gate fails, the agent's revert runs the previous release, i.e. what ran before. The
                # switch is a release switch: it settles the host itself, and the agent's apply would drop
                # the mark (as a dead bench's, agent/switch.py apply): dropped here first, so no interrupt
                # of this greenlet (Ctrl-C, a KeyboardInterrupt) during the switch leaves it behind
                _unmark(host)
                promoted = _promote_switch(host, job, verdict)
            else:
                promoted = False
                if _restore(host, previous, job.lease):
                    _unmark(host)  # else the next bench or deploy tries again
            joined = _join(host, job, routed)
        finally:
            interrupts.leave()
            if records:
                _report(host, job, records)
    if verdict is not None:
        _promoted(host, job, verdict, promoted)
    if not joined:
        raise RouterFailed(f"{host.name}: bench: not back in the router of replica set {job.replica_set} (above)")
    if routed:
        rollout.end(host)  # the next member of its set may leave the router
    if interrupts.deferred:
        raise BenchInterrupted(f"{interrupts.deferred} (after the measurements: what it began was finished)")


def _leave(host, job: Job) -> list:
    """A replica: out of its router and drained for the whole bench (the others serve), once fewer
    than max_unavailable members of its set are out (rollout.begin: the members benched in this
    run take turns); rollout.begin's arguments, [] for a host of no set."""
    if job.replica_set is None:
        return []
    try:
        routed = rollout.begin(host)
    except rollout.Stopped as stopped:
        raise RouterFailed(f"{host.name}: bench not run: {stopped}") from None
    _say(host, f"out of the router of replica set {job.replica_set} while it runs (the other replicas serve)")
    if not rollout.router_step(host, "router-leave", routed):
        raise RouterFailed(f"{host.name}: bench not run: it could not leave the router of {job.replica_set} (above)")
    return routed


def _join(host, job: Job, routed: list) -> bool:
    """After the restore or the promote: what runs back in the router (nothing runs: it stays out)."""
    if not routed:
        return True
    return rollout.router_step(host, "router-join", routed)


def _promote_switch(host, job: Job, verdict: promote.Verdict) -> bool:
    """promote=1: the winner's switch (a release, its gate, the revert); True once it runs."""
    assert verdict.winner is not None
    _say(host, f"promote: {verdict.why}: switching to {verdict.winner} (a new release, its gate)")
    ok, output = run_followed(host, job.promotions[verdict.winner], verdict.winner)
    if not ok:
        for line in output.output_lines:
            logger.info(f"{host.print_prefix}  {printable(line)}")
    return ok


def _promoted(host, job: Job, verdict: promote.Verdict, promoted: bool) -> None:
    """After the report: the promoted configuration written for the next deploy, or why not."""
    if verdict.winner is None:
        _say(host, f"promote: nothing promoted: {verdict.why}; nothing switched, nothing written")
        return
    if not promoted:
        raise PromoteFailed(
            f"{host.name}: promote: {verdict.winner} failed its gate and the previous release runs again "
            f"(the agent's words above); {host_files.located(job.project_dir, promote.PROMOTED_FILE)} not written"
        )
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name in job.members or (host.name,):  # a replica set serves one configuration: the winner is the set's
        path = promote.write(job.project_dir, name, verdict, job.run_id, when)
    written = ", ".join(job.members or (host.name,))
    _say(
        host,
        f"promote: {verdict.winner} is active; {path}: {written} active_server: {verdict.winner} (host data, "
        "above group_data's own files, below --data; delete the entry to go back)"
        + (
            f"; replica set {job.replica_set}: the next deploy.py rolls its other members to it, one at a time "
            "(out of the router, drained, switched, gated, back)"
            if job.members
            else ""
        ),
    )


class _Interrupts:
    """SIGINT/SIGTERM -> BenchInterrupted in every benching greenlet of this controller where it
    waits while it measures; one that is settling (its restore, or its promote) is not cut short:
    it finishes and then fails with the signal (`deferred`). A second signal is only answered.
    One Python-level handler for all hosts benching at once (pyinfra runs each host's python.call
    in its own greenlet; a handler per host replaced the one before and put back the wrong one),
    installed by the first, the previous handlers put back by the last: pyinfra's CLI replaces
    gevent's own for SIGINT with one that only exits (pyinfra_cli/main.py main)."""

    _active: list["_Interrupts"] = []
    _saved: dict = {}
    _fired: list[int] = []

    def __init__(self, worker, host) -> None:
        self.worker, self.host = worker, host
        self.settling = False
        self.deferred: str | None = None

    @classmethod
    def enter(cls, worker, host) -> "_Interrupts":
        if not cls._active:
            cls._fired.clear()
            cls._saved = {sig: signal.signal(sig, cls._handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        bench = cls(worker, host)
        cls._active.append(bench)
        return bench

    def leave(self) -> None:
        type(self)._active.remove(self)
        if not self._active:
            for sig, handler in self._saved.items():
                signal.signal(sig, handler)

    @classmethod
    def _handler(cls, signum, frame) -> None:
        name = signal.Signals(signum).name
        first = not cls._fired
        cls._fired.append(signum)
        for bench in list(cls._active):
            if bench.settling or not first:
                bench.deferred = bench.deferred or name
                logger.warning(
                    f"{bench.host.print_prefix}bench: {name}: still putting the configuration back "
                    "(or promoting the winner), please wait"
                )
            else:
                bench.worker.kill(BenchInterrupted(name), block=False)


def _dead_bench(host) -> dict | None:
    """The mark of a bench in progress, left by one that died (paths.BENCH_MARK), or None."""
    ok, output = host.run_shell_command(StringCommand("cat", MARK), print_output=False)
    try:
        mark = json.loads(output.stdout) if ok else None
    except ValueError:
        return None
    return mark if isinstance(mark, dict) else None


def _mark(host, run_id: str, before: str | None) -> None:
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = json.dumps({"run_id": run_id, "before": before, "started": started})
    host.put_file(BytesIO(text.encode()), MARK, print_output=False)


def _unmark(host) -> None:
    host.run_shell_command(StringCommand("rm", "-f", MARK), print_output=False)


def _restore(host, previous: str | None, lease: str) -> bool:
    _say(host, f"restoring {previous} (fresh start)" if previous else "nothing ran before: stopping what runs")
    started = _switch(host, previous, lease)
    if started.ok:
        _say(host, f"{previous} is running again" if previous else "nothing runs, as before")
    else:
        _say(host, f"{previous or 'the stop'} FAILED: {started.diagnosis}")
    return started.ok


def _running_now(host, servers: list[str]) -> str | None:
    """The configuration running now (at most one: the units conflict), or None."""
    units = [paths.unit_name(s) for s in servers]
    ok, output = host.run_shell_command(
        StringCommand("systemctl", "show", "-p", ",".join(["Id", *systemd.STATE_PROPERTIES]), *units),
        print_output=False,
    )
    running = [b["Id"] for b in systemd.parse_show(output.stdout) if systemd.state(b) in systemd.RUNNING]
    return running[0].removeprefix(paths.UNIT_PREFIX).removesuffix(".service") if ok and running else None


def _switch(host, server: str | None, lease: str, watch: Watch | None = None) -> Start:
    """Run `server` (None: none) fresh through the agent's transient switch; its start's record.
    Its progress while it waits: `server`'s phase, or what `watch` reads."""
    tic = time.monotonic()
    ok, output = run_followed(host, releases.transient(server, lease), server, watch)
    wall = time.monotonic() - tic
    lines = [printable(line) for line in output.output_lines]  # the agent's words, shown and kept
    timings: dict[str, float] = next(
        (json.loads(line.split(TIMINGS, 1)[1]) for line in reversed(lines) if TIMINGS in line), {}
    )
    stop = timings.get("stop_s", 0.0) + timings.get("gpus_free_s", 0.0)
    # the record is this start's once the unit was started (start_s); else the switch's own words say why
    record = _status_record(host, server) if server and "start_s" in timings else {}
    if not ok:
        for line in lines:
            logger.info(f"{host.print_prefix}  {line}")
    return Start(server, ok, wall - stop, stop, record, lines)


def _status_record(host, server: str) -> dict:
    ok, output = host.run_shell_command(
        StringCommand("cat", f"{paths.STATE_DIR}/status/{server}.json"), print_output=False
    )
    try:
        return printable_tree(json.loads(output.stdout)) if ok else {}  # type: ignore[return-value]
    except ValueError:
        return {}


def _measure(host, job: Job, name: str, position: str) -> dict:
    tic = time.monotonic()
    _say(host, f"{name} ({position}): fresh start, waiting for the readiness gate")
    started = _switch(host, name, job.lease, starting_watch(name, position))
    record = {
        "run_id": job.run_id,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": host.name,
        "configuration": name,
        "status": "failed",
        "diagnosis": None,
        "sglang_version": job.sglang_version,
        "nccl_profile": job.nccl_profile,
        "release": job.release,
        "plan": {k: v for k, v in job.plan.items() if k != "prompts"},
        "startup": {
            "phases": started.record.get("startup_phases") or {},
            "total_s": started.record.get("startup_s"),
            "switch_s": round(started.seconds, 3),
            "stop_previous_s": round(started.stop_seconds, 3),
        },
        "single_stream": None,
        "sweep": [],
        **job.extra,
    }
    if not started.ok:
        record.update(diagnosis=started.diagnosis, diagnosis_file=started.record.get("diagnosis"))
        _say(host, f"{name}: FAILED to start: {started.diagnosis}")
        return record
    _say(host, f"{name}: ready after {started.seconds:.1f}s; measuring")
    raw = _run_client(host, job, name, position)
    if raw is None:
        record["diagnosis"] = "the benchmark client produced no result (its output is above)"
        return record
    runs = raw["runs"]
    info = raw.get("server_info") or {}
    record.update(
        status="ok" if runs and not any(r.get("error") for r in runs[0]["requests"]) else "failed",
        sglang_version=info.get("version") or job.sglang_version,
        single_stream=metrics.run_metrics(runs[0], info) if runs else None,
        sweep=[metrics.run_metrics(run) for run in runs[1:]],
    )
    if record["status"] == "failed":
        record["diagnosis"] = "; ".join(record["single_stream"]["errors"]) if record["single_stream"] else "no run"
    measured = sum(run["duration_s"] for run in runs) + sum(r["latency"] for r in raw.get("warmup", []))
    startup = record["startup"]["total_s"] or started.seconds
    record["overhead_s"] = round(time.monotonic() - tic - started.stop_seconds - startup - measured, 3)
    single = record["single_stream"] or {}
    accept = single.get("accept_length")
    _say(
        host,
        f"{name}: {single.get('output_throughput', 0):.1f} output tok/s, TPOT {single.get('mean_tpot_ms', 0):.2f} ms"
        + (f", accept length {accept:.2f}" if accept else ""),
    )
    return record


def _run_client(host, job: Job, name: str, position: str) -> dict | None:
    endpoint_host, port = job.endpoints[name]
    plan_path, out_path = f"{REMOTE_DIR}/plan-{name}.json", f"{REMOTE_DIR}/result-{name}.json"
    progress_path = f"{REMOTE_DIR}/progress-{name}.json"
    plan = {
        **job.plan,
        "server": name,
        "host": endpoint_host,
        "port": port,
        "api_key_file": paths.secret_config_path(name) if job.api_key else None,
        "progress_file": progress_path,
    }
    host.put_file(BytesIO(json.dumps(plan).encode()), plan_path, print_output=False)
    host.run_shell_command(StringCommand("rm", "-f", out_path, progress_path), print_output=False)
    # Live: a line from its progress file every INTERVAL_S (tools/bench/progress.py). Its own lines
    # quote the server: shown escaped once it is done (pyinfra's print_output would write them raw).
    _, said = run_followed(
        host,
        StringCommand("python3", CLIENT, "--plan", plan_path, "--out", out_path),
        watch=client_watch(name, position, progress_path),
    )
    for line in said.output_lines:
        logger.info(f"{host.print_prefix}  {printable(line)}")
    ok, output = host.run_shell_command(StringCommand("cat", out_path), print_output=False)
    try:
        return printable_tree(json.loads(output.stdout)) if ok else None  # type: ignore[return-value]
    except ValueError:
        return None


def _report(host, job: Job, records: list[dict]) -> None:
    history_path = results.append(job.results_dir, records)
    title = f"sglang-pve bench {job.run_id} on {host.name}, release {job.release or '-'}"
    markdown = job.results_dir / f"{job.run_id}.md"
    markdown.write_text(results.render_markdown(records, title), encoding="utf-8")
    png = chart.write_png(records, job.results_dir / f"{job.run_id}.png", title)
    lines = [title, results.render_text(records)]
    history = results.load(job.results_dir)
    unwritten = exported.write(host, exported.render(exported.latest(history, host.name)))
    if unwritten:
        lines.append(f"bench metrics not written: {unwritten}")
    if job.compare:
        earlier = results.earlier_run(history, job.run_id, host.name, job.compare)
        lines.append(
            results.render_change(records, results.run_records(history, earlier, host.name))
            if earlier
            else f"no earlier run {job.compare!r} of {host.name} in {history_path}"
        )
    lines.append(f"history: {history_path}; table: {markdown}; chart: {png}")
    logger.info("\n".join(lines))
