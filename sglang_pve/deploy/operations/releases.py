"""Releases: record what runs, switch to it atomically, roll back (the host side is
sglang_pve/agent/release_store.py and switch.py; each operation yields one agent command).

For other tasks the API is the operation

    releases.switched(server="eagle3-3step", keep=5, venvs_dir="/opt/sglang/venvs")

It records a release of the files in place with that configuration active and switches to it:
stop -> GPUs verified free -> start -> readiness gate (a fresh start, also when it already ran).
When the gate fails, the previous release runs again and the switch fails (exit code 9) with the
reason and the gate's diagnosis in its output; the line `switch-timings {...}` gives stop,
GPUs-free, start and total seconds. Code that runs at execution time (the benchmark's python.call)
runs the same steps without recording a release:

    ok, output = host.run_shell_command(releases.transient("eagle3-3step", lease=run_token()))
"""

import base64
import json
from dataclasses import asdict, dataclass, field

from pyinfra import host, logger, state
from pyinfra.api import OperationError, QuoteString, StringCommand, operation

from sglang_pve.deploy import fleet, group_switch, paths, rollout
from sglang_pve.deploy.facts.files import FileDigests
from sglang_pve.deploy.facts.releases import Releases, UnitsAndReleases
from sglang_pve.deploy.operations import systemd
from sglang_pve.deploy.operations.files import ManagedFile, show_diff
from sglang_pve.deploy.progress import FollowedCommand
from sglang_pve.deploy.provenance import who


@dataclass(frozen=True)
class Release:
    """What should run: the controller's side of a release record (agent/release_store.py)."""

    sglang_version: str
    venv: str
    active_server: str | None
    units: tuple[str, ...]
    nccl_profile: str
    files: dict[str, str]  # path -> sha256 of the rendered content
    blocks: dict = field(default_factory=dict)  # path -> {"marker", "body"}
    secrets: tuple[str, ...] = ()  # files holding secrets: their records say so, their content never leaves the host
    user: str | None = None
    commit: str | None = None

    @property
    def lifecycle(self) -> str | None:
        return paths.lifecycle_path(self.active_server) if self.active_server else None

    def matches(self, record: dict | None, runtime_only: bool = False) -> bool:
        """The record describes this release (same version, configuration, profile, contents);
        runtime_only: the same server would run, ignoring the other configurations' files."""
        if not record:
            return False
        files = _digests(record)
        wanted = self.files
        if runtime_only:
            idle = {
                p
                for u in self.units
                if u != paths.unit_name(self.active_server or "")
                for p in paths.server_paths(u.removeprefix(paths.UNIT_PREFIX).removesuffix(".service"))
            }
            files, wanted = ({p: d for p, d in f.items() if p not in idle} for f in (files, wanted))
        same = (record["sglang_version"], record["active_server"], record["nccl_profile"], files)
        return same == (self.sglang_version, self.active_server, self.nccl_profile, wanted) and (
            runtime_only or (record.get("blocks") or {}) == self.blocks
        )

    def agent_spec(self) -> dict:
        spec = asdict(self)
        spec.update(
            files=dict(sorted(self.files.items())),
            units=list(self.units),
            secrets=sorted(self.secrets),
            lock=paths.lock_path(self.venv),
            lifecycle=self.lifecycle,
        )
        return spec


def _agent(*args, lease: str, server: str | None) -> StringCommand:
    """A switch of the run that holds the container's deploy lock (`lease`: its token), in a unit of
    its own that goes on when this run's SSH session ends (agent/detached.py); the run follows it,
    logging `server`'s phase while it waits (deploy/progress.py)."""
    return FollowedCommand(
        "python3",
        QuoteString(paths.AGENT),
        *args,
        "--dir",
        QuoteString(paths.RELEASES_DIR),
        "--lease",
        lease,
        "--detach",
        server=server,
    )


def _apply(spec: dict, keep: int, venvs_dir: str, lease: str, record_only: bool = False, routed=()) -> StringCommand:
    encoded = base64.b64encode(json.dumps(spec, sort_keys=True).encode()).decode()
    return _agent(
        "apply",
        "--spec",
        encoded,
        "--keep",
        str(keep),
        "--venvs-dir",
        QuoteString(venvs_dir),
        *(["--record-only"] if record_only else routed),
        lease=lease,
        server=spec.get("active_server"),
    )


def _digests(record: dict) -> dict[str, str]:
    """A release record's files as path -> sha256, as Release.files has them."""
    return {path: entry["sha256"] for path, entry in record["files"].items()}


def _running(report, record: dict | None) -> bool:
    """The record's server runs, and no switch was left unfinished (a killed switch may have
    started another server, or none): otherwise the rerun switches again."""
    if report.pending is not None or not record:
        return False
    return record["active_server"] is None or paths.unit_name(record["active_server"]) in report.running


def _adopted(report, lease: str) -> str:
    """When the current release is the outcome of another run's switch that nobody saw end (its
    controller went away during it: agent/detached.py), the words that say this run adopts it."""
    switch = report.switch
    if not switch or switch.get("seen") or switch.get("lease") == lease or switch.get("current") != report.current:
        return ""
    return (
        f"; adopted: the {switch.get('command')} of run {switch.get('lease')}, whose controller went away, "
        f"ended {switch.get('ended')} with exit {switch.get('code')} in {switch.get('unit')}"
    )


@operation()
@group_switch.taking_part
def release(release: Release, keep: int, venvs_dir: str, lease: str, units: dict[str, list[ManagedFile]] | None = None):
    """
    Install the server units (`units`), then record `release` on the host and switch to it, unless
    it is the current release and runs. When only files that no running process reads changed
    (another configuration's unit, the shell block), the release is recorded and becomes current
    without a restart.

    + release: what should run (sglang_pve.deploy.render.release)
    + keep: releases kept (older ones, and venvs only they used, are removed)
    + venvs_dir: only venvs under it are ever removed
    + lease: the token of this run's deploy lock (deploy/operations/lock.py)
    + units: server name -> its files (sglang_pve.deploy.render.server_files), installed first
      (deploy/operations/systemd.py unit_commands); None: they are in place already

    The units' state and the releases are read in one command (UnitsAndReleases), before the units
    are written: what the release decides from (the records, the current and pending ids, which
    units of the current release run, whether it is ready: a TP group's ranks adopt on that) is
    what the unit commands leave alone. They write files that
    no record or running unit reflects until the switch records them, run daemon-reload (which
    starts and stops nothing), and disable only units of configurations no longer declared: when
    such a unit is the current release's active one, `release` names another active server (or
    none) and switches whatever runs; any other is not among the current release's running units.
    So the read after the writes would decide the same, and a no-change run reads once.

    **Example:**

    .. code:: python

        release(release=render.release(deployment, venv, site_packages), keep=5, venvs_dir="/opt/sglang/venvs",
                lease=run_token(), units={"baseline": server_files(deployment, baseline, venv)})
    """
    if units is None:
        unit_changes, report = [], host.get_fact(Releases)
    else:
        current_units, report = host.get_fact(UnitsAndReleases, **systemd.unit_fact_args(units))
        unit_changes = systemd.unit_commands(units, current_units)
    current = report.current_record
    running = _running(report, current)
    same = current is not None and release.matches(current) and running
    # only files of configurations that do not run (or the shell block) changed: record, no restart
    record_only = running and not same and release.matches(current, runtime_only=True)
    rank = group_switch.member(host)
    if rank is not None and not rank.adopts((same or record_only) and report.ready):
        yield from unit_changes
        yield from _group_switched(  # a TP group's rank: the whole group switches, also a rank whose release runs
            rank,
            _apply(release.agent_spec(), keep, venvs_dir, lease, routed=group_switch.NO_REVERT),
            report,
            release.units,
            lease,
        )
        return
    if same:
        assert current is not None
        adopted = _adopted(report, lease)
        if adopted:  # shown without -v: the operator reran after a drop and must learn what happened
            _say(f"release {current['id']} runs{adopted}")
        if not unit_changes:
            in_place = "" if units is None else f"{len(units)} server unit(s) up to date; "
            host.noop(
                f"{in_place}release {current['id']} runs ({release.active_server or 'no server'}, "
                f"SGLang {release.sglang_version})" + adopted + _every_rank(rank)
            )
        yield from unit_changes
        return
    if not record_only:  # said without -v (and before the first command: change detection stops there)
        _say(f"switching: {_why_switching(release, current, report)}")
    yield from unit_changes
    if record_only:
        yield _apply(release.agent_spec(), keep, venvs_dir, lease, record_only=True)
        return
    # a replica: out of its router while it switches
    yield from rollout.switching(
        host, lambda routed: _apply(release.agent_spec(), keep, venvs_dir, lease, routed=routed)
    )


def _say(message: str) -> None:
    """Log once per run, without -v: pyinfra runs an operation's generator at change detection
    (without -y) and again when it executes, or only then (pyinfra api/operation.py, 3.10.0)."""
    if state.is_executing != state.should_check_for_changes():
        logger.info(f"{host.print_prefix}{message}")


def _why_switching(release: Release, current: dict | None, report) -> str:
    """What differs between the release that should run and the host's current one, in words."""
    if current is None:
        return "no release recorded yet"
    reasons = [
        f"{what} {current[key]} -> {wanted}"
        for what, key, wanted in (
            ("SGLang", "sglang_version", release.sglang_version),
            ("active server", "active_server", release.active_server),
            ("NCCL profile", "nccl_profile", release.nccl_profile),
        )
        if current[key] != wanted
    ]
    recorded = _digests(current)
    changed = sorted(p for p in {*recorded, *release.files} if recorded.get(p) != release.files.get(p))
    if changed:
        reasons.append(
            f"{len(changed)} file(s) changed ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})"
        )
    if (current.get("blocks") or {}) != release.blocks:
        reasons.append("a managed block changed")
    if not _running(report, current):
        unfinished = report.pending is not None
        reasons.append(
            "a switch was left unfinished"
            if unfinished
            else f"{paths.unit_name(current['active_server'])} does not run"
        )
    return "; ".join(reasons) or "the release changed"


def _every_rank(rank) -> str:
    return f"; every rank of TP group {rank.group} runs its release and is ready: adopted" if rank else ""


def _group_switched(rank, command, report, units, lease: str):
    """A TP group's switch on this rank (deploy/group_switch.py): when it fails on any rank, every
    rank runs the release current before it again (`report`'s), where a rollback went before too."""
    current = report.current_record
    revert = None
    if current is not None:

        def revert(why: str) -> StringCommand:
            return _agent(
                "revert",
                "--to",
                QuoteString(current["id"]),
                *(["--previous", QuoteString(report.previous)] if report.previous else []),
                "--why",
                QuoteString(why),
                lease=lease,
                server=current["active_server"],
            )

    alone = fleet.group_problem(rank.host, "a switch")  # a rank left out of the run would not wait: none starts
    if alone is not None:
        yield rollout.refused_step(alone.render(rank.host.name))
        return
    yield from rank.switched(command, sorted({*units, *(current["units"] if current else [])}), revert)


@operation()
@group_switch.taking_part
def switched(server: str, keep: int, venvs_dir: str, lease: str):
    """
    Make configuration `server` the one that runs: a new release of the files in place (every
    configuration's files are installed by the deploy), switched to atomically.

    + server: a configuration of the current release (group_data/servers.yml)
    + keep, venvs_dir, lease: as for release()

    **Example:**

    .. code:: python

        switched(server="eagle3-3step", keep=5, venvs_dir="/opt/sglang/venvs", lease=run_token())
    """
    report = host.get_fact(Releases)
    current = report.current_record
    if current is None:
        raise OperationError(f"{host.name}: no release yet; run deploy.py first")
    if paths.unit_name(server) not in current["units"]:
        names = ", ".join(u.removeprefix(paths.UNIT_PREFIX).removesuffix(".service") for u in current["units"])
        raise OperationError(
            f"{host.name}: server={server!r} is not a configuration of release {current['id']}; use one of {names}"
        )
    runs = current["active_server"] == server and _running(report, current)
    rank = group_switch.member(host)  # a TP group's rank: the group adopts, or switches, as one
    if rank.adopts(runs and report.ready) if rank is not None else runs:
        host.noop(f"{server} runs (release {current['id']})" + _every_rank(rank))
        return
    if rank is not None:
        command = switch_to(current, server, keep, venvs_dir, lease, routed=group_switch.NO_REVERT)
        yield from _group_switched(rank, command, report, current["units"], lease)
        return
    yield from rollout.switching(host, lambda routed: switch_to(current, server, keep, venvs_dir, lease, routed=routed))


def switch_to(current: dict, server: str, keep: int, venvs_dir: str, lease: str, routed=()) -> StringCommand:
    """switched()'s agent command: a release of `current`'s files with `server` active, switched to
    (the bench's promote runs it at execution time: tools/bench/promote.py)."""
    return _apply(_switch_spec(current, server), keep, venvs_dir, lease, routed=routed)


def _switch_spec(current: dict, server: str) -> dict:
    """The current release with another configuration active (its files are all in place)."""
    spec = {key: current[key] for key in ("sglang_version", "venv", "nccl_profile", "blocks", "units")}
    spec.update(
        active_server=server,
        lifecycle=paths.lifecycle_path(server),
        files={path: entry["sha256"] for path, entry in sorted(current["files"].items())},
        secrets=sorted(path for path, entry in current["files"].items() if entry.get("secret")),
        lock=current["lock"]["path"],
        user=who(),
        commit=current.get("commit"),
    )
    return spec


def transient(server: str | None, lease: str) -> StringCommand:
    """The agent command that runs configuration `server` of the current release (None: none) through
    the switch's steps, recording nothing (agent/switch.py, transient): exit 0 once its gate passed,
    9 when it failed and what ran before runs again, 10 when that failed too."""
    return _agent("transient", *(["--server", QuoteString(server)] if server else []), lease=lease, server=server)


@operation()
@group_switch.taking_part
def rolled_back(to: str | None, keep: int, venvs_dir: str, lease: str):
    """
    Run a recorded release again, its files byte for byte: `to` (a release id) or, when None,
    the last ready release before the newest ready one (so a second rollback changes nothing).

    + to: a release id (`tasks/rollback.py --data list=1` lists them) or None
    + keep, venvs_dir, lease: as for release()

    Under --diff every file that would change is shown as a unified diff, a secret file only as
    changing: its content never leaves the host (the Releases fact gives its sha1; the agent
    restores it from the release's blob). The release's venv must exist (tasks/rollback.py
    reinstalls it from the release's lock first).

    **Example:**

    .. code:: python

        rolled_back(to="20261130T114354Z-3f2a9c1d", keep=5, venvs_dir="/opt/sglang/venvs", lease=run_token())
    """
    report = host.get_fact(Releases, files_of=to or "previous")
    if report.target is None:
        raise OperationError(f"{host.name}: cannot roll back: {report.error}")
    target = report.get(report.target)
    assert target is not None  # the agent reports its target among the releases
    states = host.get_fact(FileDigests, paths=sorted(target["files"]))
    wanted = [
        ManagedFile(path, b"", e["mode"], e["user"], e["group"], secret=True, known_sha1=report.secret_sha1[path])
        if path in report.secret_sha1
        else ManagedFile(path, _text_or_bytes(report.contents[path]), e["mode"], e["user"], e["group"])
        for path, e in sorted(target["files"].items())
    ]
    changed = [f for f in wanted if f.needs_write(states.get(f.path))]
    runs = report.current == target["id"] and not changed and _running(report, target)
    rank = group_switch.member(host)  # a TP group's rank: the group adopts, or rolls back, as one
    if rank.adopts(runs and report.ready) if rank is not None else runs:
        host.noop(f"release {target['id']} runs" + _every_rank(rank))
        return
    logger.info(
        f"{host.print_prefix}rolling back to release {target['id']}: {target['active_server']}, "
        f"SGLang {target['sglang_version']}, NCCL profile {target['nccl_profile']} (now: {report.current})"
    )
    if state.config.DIFF:
        for file in changed:
            show_diff(file, states.get(file.path))

    def command(routed) -> StringCommand:
        return _agent(
            "switch",
            "--to",
            QuoteString(target["id"]),
            "--keep",
            str(keep),
            "--venvs-dir",
            QuoteString(venvs_dir),
            *routed,
            lease=lease,
            server=target["active_server"],
        )

    if rank is not None:
        units = report.current_record["units"] if report.current_record else []
        yield from _group_switched(rank, command(group_switch.NO_REVERT), report, target["units"] + units, lease)
        return
    yield from rollout.switching(host, command)


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data
