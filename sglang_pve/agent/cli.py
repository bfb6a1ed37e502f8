"""The agent's command line: `python3 /opt/sglang-pve/sglang-pve-agent.pyz COMMAND ...`.

    prestart --spec FILE                   ExecStartPre: GPUs free, backoff, log offset (reaper.py)
    gate --spec FILE --main-pid PID        ExecStartPost: readiness gate, starts the watchdog (gate.py)
    watchdog --spec FILE [--main-pid PID]  liveness after ready; started by the gate (watchdog.py)
    stop --spec FILE --main-pid PID        ExecStop: marks a requested stop (stopping.py)
    poststop --spec FILE                   ExecStopPost: GPUs released, verified (reaper.py); a
                                           stop nobody asked for fails the unit as a crash, and a
                                           crash after ready is started again by policy (crashes.py)
    crash-restart --spec FILE              the delayed start after a crash (NAME.crash-restart.timer)
    status [--json] [--spec-dir DIR]       every server configuration of this host (status.py)
    holders [--spec FILE | --unit-prefix P]  processes holding /dev/nvidia*, as a JSON list
    apply --dir DIR --spec BASE64          record a release from the files on disk, switch to it (switch.py)
    switch --dir DIR --to ID               switch to a recorded release, reverting on failure (switch.py)
      (apply and switch with --router URL --address ADDR: a replica, out of its router while it
      switches, drained first, added back after: router_worker.py; with --no-revert: a TP group's
      rank, whose failed start the group reverts as one)
    revert --dir DIR --to ID [--previous ID]  a TP group's rank back to what ran before its group's
                                           failed switch (switch.py revert; deploy/group_switch.py)
    transient --dir DIR [--server NAME]    run a configuration of the current release (without
                                           --server: none) the same way, recording nothing (switch.py)
    releases --dir DIR [--files-of ID]     the release records as JSON (release_store.py)
    lock --dir DIR --token T --owner WHO --task NAME [--wait S] [--expect N]
                                           take the container's deploy lock for a whole run and
                                           leave a holder keeping it (lease.py)
    unlock --dir DIR --token T             the run's last command: the lock goes
    holder --dir DIR                       who holds the deploy lock (its lease as JSON, null when
                                           free), taking and writing nothing: a --dry run's read
    compile [--zipapp PATH]                the zipapp's copy compiled for this interpreter, which
                                           its later starts run from (zipapp.py)
    router-status --router URL [--metrics URL] [--key-file F]   a router's health, workers, metrics (JSON)
    router-sync --router URL [--key-file F] --worker URL ...    its workers exactly these (router_worker.py)
    router-leave --dir DIR --router URL --address ADDR [--drain-s S]   this replica out of its router,
                                           drained, to stay out (a replica's bench); router-join
    router-join --dir DIR --router URL --address ADDR [--wait-s S]     puts what runs back (router_worker.py);
                                           --wait-s: after a restart, once its start at boot ended
apply, switch, revert and transient take --lease T: the run holds the deploy lock already, and --detach:
the command runs in a transient unit of its own, which a dropped SSH session does not end (detached.py).

Exit codes are listed in exitcodes.py, environment overrides (tests only) in overrides.py;
`--help` prints both.
"""

from __future__ import annotations  # Store and contextlib are imported for the type checker only

import argparse
import base64
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from sglang_pve.agent import contract, exitcodes, overrides
from sglang_pve.agent.output import Reporter

if TYPE_CHECKING:
    import contextlib

    from sglang_pve.agent.release_store import Store

# Each handler imports the modules it uses, not more: most commands are short (a no-change deploy
# runs `releases`), and without the compiled copy (zipapp.py) every module imported is compiled.
DEFAULT_SPEC_DIR = contract.SERVERS_DIR
Handler = Callable[[argparse.Namespace], int]  # one command: its exit code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "detach", False):
            from sglang_pve.agent import detached

            return detached.run(argv, Reporter("switch", sys.stdout), lambda: int(args.handler(args)))
        code: int = args.handler(args)  # set by _parser: one of the Handlers below
        return code
    except Exception as error:  # noqa: BLE001 - the unit's log must show what went wrong
        return _failed(args.command, error)


# A command's own refusals, by (module, class): one raised was imported by its command, so nothing is
# imported to tell them. A long-running command (a unit's watchdog) that imported a module from the
# zipapp when it failed would read it at the offsets of the zip it started from, in the file the last
# deploy put at that path since ("bad local file header"), and lose what it meant to say.
_REFUSALS = {
    ("sglang_pve.agent.spec", "SpecError"): exitcodes.USAGE,
    ("sglang_pve.agent.release_store", "ReleaseError"): exitcodes.USAGE,
    ("sglang_pve.agent.lease", "LeaseError"): exitcodes.LOCKED,
}


def _failed(command: str, error: Exception) -> int:
    """The exit code of a command that raised `error`, and what it says (called while it is handled).
    A command's own refusal (a bad spec or release, the lock held by another run) is one line; anything
    else prints its traceback."""
    for kind in type(error).__mro__:
        code = _REFUSALS.get((kind.__module__, kind.__name__))
        if code is not None:
            print(f"sglang-pve-agent {command}: {error}", file=sys.stderr)
            return code
    traceback.print_exc()
    return exitcodes.INTERNAL


def _prestart(args: argparse.Namespace) -> int:
    from sglang_pve.agent import reaper, stopping
    from sglang_pve.agent.spec import load

    spec = load(args.spec)
    stopping.take(spec, "failing")  # a new start: the watchdog's mark of an earlier one is stale
    return reaper.prestart(spec, Reporter("prestart", sys.stderr, log=spec.log))


def _gate(args: argparse.Namespace) -> int:
    from sglang_pve.agent import gate
    from sglang_pve.agent.spec import load

    spec = load(args.spec)
    return gate.run(spec, args.main_pid, Reporter("gate", sys.stdout, log=spec.log))


def _watchdog(args: argparse.Namespace) -> int:
    from sglang_pve.agent import watchdog
    from sglang_pve.agent.spec import load

    spec = load(args.spec)
    return watchdog.run(spec, args.main_pid, Reporter("watchdog", sys.stdout, log=spec.log))


def _stop(args: argparse.Namespace) -> int:
    """ExecStop: runs for every stop of a started unit; the main PID still lives only when the
    stop was requested (after a crash systemd runs it with $MAINPID empty)."""
    from sglang_pve.agent import procs, stopping
    from sglang_pve.agent.spec import load

    spec = load(args.spec)
    main = procs.identify(args.main_pid) if args.main_pid else None
    if main is not None and procs.alive(main):
        stopping.mark(spec)
        Reporter("stop", sys.stdout, log=spec.log)(f"stop requested: SIGTERM to main PID {main.pid} follows (drain)")
    return exitcodes.OK


def _poststop(args: argparse.Namespace) -> int:
    from sglang_pve.agent import crashes, reaper, stopping
    from sglang_pve.agent.spec import load

    spec = load(args.spec)
    say = Reporter("poststop", sys.stdout, log=spec.log)
    crash = stopping.crashed(stopping.take(spec), os.environ)
    failing = stopping.take(spec, "failing")
    code = reaper.poststop(spec, say)
    if crash and failing:  # the watchdog's SIGKILL (its restart cap, a TP peer gone): its verdict says why
        say(f"{spec.unit} was failed on purpose by its watchdog; the unit stays failed", error=True)
        return exitcodes.CRASH
    if crash:
        blocked = None if code == exitcodes.OK else f"the GPUs were not released (poststop exit {code})"
        crashes.after_crash(spec, crash, say, blocked)
        return exitcodes.CRASH if code == exitcodes.OK else code
    return code


def _crash_restart(args: argparse.Namespace) -> int:
    from sglang_pve.agent import crashes
    from sglang_pve.agent.spec import load

    spec = load(args.spec)
    return crashes.restart(spec, Reporter("crash-restart", sys.stdout, log=spec.log))


def _status(args: argparse.Namespace) -> int:
    from sglang_pve.agent import status

    report = status.collect(args.spec_dir)
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else status.render(report))
    return exitcodes.OK


def _holders(args: argparse.Namespace) -> int:
    from sglang_pve.agent import holders
    from sglang_pve.agent.spec import load

    prefix = load(args.spec).unit_prefix if args.spec else args.unit_prefix
    print(json.dumps([h.to_json() for h in holders.scan(prefix)], indent=2))
    return exitcodes.OK


def _recorded(args: argparse.Namespace, store: Store) -> contextlib.AbstractContextManager[Callable[[int], int]]:
    """In a detached switch's unit (--in-unit), its outcome on the host (detached.py)."""
    from sglang_pve.agent import detached

    return detached.recorded(store.dir, args.in_unit, args.command, args.lease, store.current_id)


def _apply(args: argparse.Namespace) -> int:
    from sglang_pve.agent import switch
    from sglang_pve.agent.release_store import Store

    spec = json.loads(base64.b64decode(args.spec))
    with Store(args.dir).locked(args.lease, Reporter("lock", sys.stdout)) as store, _recorded(args, store) as done:
        say = Reporter("switch", sys.stdout)
        return done(
            _routed(
                args,
                store,
                lambda: switch.apply(
                    store, spec, say, args.keep, args.venvs_dir, record_only=args.record_only, revert=args.revert
                ),
                spec.get("active_server"),
            )
        )


def _switch(args: argparse.Namespace) -> int:
    from sglang_pve.agent import switch
    from sglang_pve.agent.release_store import Store

    with Store(args.dir).locked(args.lease, Reporter("lock", sys.stdout)) as store, _recorded(args, store) as done:
        say = Reporter("switch", sys.stdout)
        to = args.to
        return done(
            _routed(
                args,
                store,
                lambda: switch.switch(store, to, say, args.keep, args.venvs_dir, rollback=True, revert=args.revert),
                to in store.ids() and store.get(to).get("active_server") or None,
            )
        )


def _routed(args: argparse.Namespace, store: Store, run: Callable[[], int], target: str | None) -> int:
    """A replica's switch goes out of its router and back (router_worker.py); others run as they are.
    `target`: the configuration switched to."""
    from sglang_pve.agent import router_worker

    if not args.router or args.record_only:
        return run()
    say = Reporter("router", sys.stdout)
    key = router_worker.router_key(store, target)
    return router_worker.with_router(
        args.router, args.address, key, say, args.drain_s, run, lambda: router_worker.running_url(store, args.address)
    )


def _revert(args: argparse.Namespace) -> int:
    from sglang_pve.agent import switch
    from sglang_pve.agent.release_store import ReleaseError, Store

    with Store(args.dir).locked(args.lease, Reporter("lock", sys.stdout)) as store, _recorded(args, store) as done:
        if args.to not in store.ids():
            raise ReleaseError(f"no release {args.to!r} in {store.dir}")
        return done(switch.revert(store, args.to, Reporter("switch", sys.stdout), args.previous, args.why))


def _transient(args: argparse.Namespace) -> int:
    from sglang_pve.agent import switch
    from sglang_pve.agent.release_store import Store

    with Store(args.dir).locked(args.lease, Reporter("lock", sys.stdout)) as store, _recorded(args, store) as done:
        return done(switch.transient(store, args.server, Reporter("switch", sys.stdout), args.spec_dir))


def _releases(args: argparse.Namespace) -> int:
    from sglang_pve.agent import detached, release_store, systemd

    report = release_store.Store(args.dir).summary(args.files_of)
    current = next((r for r in report["releases"] if r["id"] == report["current"]), None)
    units = current["units"] if current else []
    states = systemd.active_states(units)  # one systemctl call for both
    report["running"] = [unit for unit in units if states[unit] in systemd.RUNNING]
    # its server passed its gate and runs (a TP group adopts what runs only when every rank is ready)
    active = [unit for unit in units if states[unit] == "active"]
    report["ready"] = current is not None and release_store.ready(current, active)
    report["switch"] = detached.read(args.dir)
    print(json.dumps(report, sort_keys=True))
    return exitcodes.OK


def _lock(args: argparse.Namespace) -> int:
    """--json (the controller's fact): one line {"held": bool, "message": the last words, "holder":
    the lease of the run that holds it when this one did not get it (lease.py), else null}, exit 0."""
    from sglang_pve.agent import lease, procs

    watch = procs.identify(args.watch_pid) if args.watch_pid else lease.ssh_connection()
    said: list[str] = []
    report = Reporter("lock", sys.stderr if args.json else sys.stdout)

    def say(text: str, error: bool = False) -> None:
        said.append(text)
        report(text, error)

    max_hold = lease.MAX_HOLD_S if args.max_hold is None else args.max_hold  # None: parsed without importing lease
    if watch is None and not args.watch_pid and lease.connection_gone():
        say(
            f"not taking the deploy lock of {args.dir}: the SSH connection this command came through is gone "
            f"(no sshd among its parents), so nothing would end the hold before {max_hold:g}s. "
            "Fix: rerun the deploy; to hold the lock from a shell that outlives its SSH session, name the "
            "process to watch with --watch-pid",
            error=True,
        )
        code = exitcodes.LOCKED
    else:
        code = lease.acquire(args.dir, args.token, args.owner, args.task, args.wait, say, watch, max_hold, args.expect)
    if not args.json:
        return code
    held = code == exitcodes.OK
    holder = None if held else lease.read(args.dir)
    print(json.dumps({"held": held, "message": said[-1] if said else "", "holder": holder}), flush=True)
    return exitcodes.OK


def _unlock(args: argparse.Namespace) -> int:
    from sglang_pve.agent import lease

    released = lease.release(args.dir, args.token)
    print(f"deploy lock of {args.dir} released" if released else f"deploy lock of {args.dir}: not held by this run")
    return exitcodes.OK


def _holder(args: argparse.Namespace) -> int:
    from sglang_pve.agent import lease

    print(json.dumps(lease.current(args.dir), sort_keys=True))
    return exitcodes.OK


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a lock count (a whole number): {text!r}")
    return int(text)


def _compile(args: argparse.Namespace) -> int:
    from sglang_pve.agent import zipapp

    print(f"compiled for {sys.implementation.cache_tag}: {zipapp.compile_copy(args.zipapp)}")
    return exitcodes.OK


def _token(text: str) -> str:
    if not text.isalnum() or len(text) > 64:
        raise argparse.ArgumentTypeError(f"not a lease token (1-64 letters or digits): {text!r}")
    return text


def _unit(text: str) -> str:
    from sglang_pve.agent import detached

    stamp = text.removeprefix(detached.UNIT_PREFIX).removesuffix(".service")
    if not (text == f"{detached.UNIT_PREFIX}{stamp}.service" and stamp.isdigit()):
        raise argparse.ArgumentTypeError(f"not a detached switch's unit ({detached.UNIT_PREFIX}<ms>.service): {text!r}")
    return text


def _pid(text: str) -> int | None:
    """--main-pid: a PID; empty (an unset $MAINPID) means unknown."""
    if not text.strip():
        return None
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}")
    return int(text) or None


def _server(text: str) -> str:
    if not contract.SERVER_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a server configuration name ({contract.SERVER_NAME_RULE}): {text!r}")
    return text


def _router_status(args: argparse.Namespace) -> int:
    from sglang_pve.agent import router_worker

    print(json.dumps(router_worker.status(args.router, args.metrics, args.key_file), sort_keys=True))
    return exitcodes.OK


def _router_leave(args: argparse.Namespace) -> int:
    from sglang_pve.agent import router_worker
    from sglang_pve.agent.release_store import Store

    key = router_worker.router_key(Store(args.dir))
    return router_worker.leave(args.router, args.address, key, Reporter("router", sys.stdout), args.drain_s)


def _router_join(args: argparse.Namespace) -> int:
    from sglang_pve.agent import router_worker
    from sglang_pve.agent.release_store import Store

    store = Store(args.dir)
    say = Reporter("router", sys.stdout)
    record = store.current()
    if args.wait_s and record and record.get("active_server"):  # after a restart: its start at boot first
        router_worker.wait_started(contract.unit_name(record["active_server"]), args.wait_s, say)

    def running() -> str | None:
        return router_worker.running_url(store, args.address)

    return router_worker.join(args.router, args.address, router_worker.router_key(store), say, running)


def _router_sync(args: argparse.Namespace) -> int:
    from sglang_pve.agent import router_worker

    return router_worker.sync(args.router, args.key_file, args.worker or [], Reporter("router", sys.stdout))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-pve-agent",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Lifecycle agent of sglang-pve server units (stdlib only).",
        epilog=f"{exitcodes.__doc__}\n{overrides.__doc__}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Handler, help_text: str, spec: str | None = "required") -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        if spec:
            sub.add_argument(
                "--spec",
                required=spec == "required",
                metavar="FILE",
                help=f"the server's lifecycle spec, {contract.lifecycle_path('NAME')}",
            )
        return sub

    command("prestart", _prestart, "ExecStartPre: refuse foreign GPU holders, reap ours, wait for free GPUs, backoff")
    command("gate", _gate, "ExecStartPost: wait until ready; fail on stall, deadline or crash").add_argument(
        "--main-pid", type=_pid, required=True, metavar="PID", help="the server's main PID ($MAINPID)"
    )
    command("watchdog", _watchdog, "probe /health_generate; restart a wedged server (started by gate)").add_argument(
        "--main-pid", type=_pid, metavar="PID", help="default: systemctl show -p MainPID"
    )
    command("stop", _stop, "ExecStop: mark a requested stop (so it ends inactive, not failed)").add_argument(
        "--main-pid", type=_pid, required=True, metavar="PID", help="the server's main PID ($MAINPID)"
    )
    command("poststop", _poststop, "ExecStopPost: verify the GPUs were released; fail a crash, restart it by policy")
    command("crash-restart", _crash_restart, "start a crashed unit again (its NAME.crash-restart.timer runs it)")
    sub = command("status", _status, "report every server configuration of this host", spec=None)
    sub.add_argument("--json", action="store_true", help="one JSON document (for the pyinfra fact)")
    sub.add_argument("--spec-dir", default=DEFAULT_SPEC_DIR, metavar="DIR", help=f"default {DEFAULT_SPEC_DIR}")
    sub = command("holders", _holders, "processes holding /dev/nvidia* open, as JSON", spec="optional")
    sub.add_argument(
        "--unit-prefix",
        default=contract.UNIT_PREFIX,
        help=f"marks ours without --spec (default {contract.UNIT_PREFIX})",
    )
    for name, handler, help_text in (
        ("router-status", _router_status, "a router's health, workers and metrics, as JSON (router_worker.py)"),
        ("router-sync", _router_sync, "make a router's workers exactly the --worker URLs (router_worker.py)"),
    ):
        sub = command(name, handler, help_text, spec=None)
        sub.add_argument("--router", required=True, metavar="URL", help="e.g. http://127.0.0.1:30000")
        sub.add_argument("--key-file", metavar="FILE", help="the router's key (its worker API wants it)")
        if name == "router-status":
            sub.add_argument(
                "--metrics", metavar="URL", help="its Prometheus endpoint, e.g. http://127.0.0.1:29000/metrics"
            )
        else:
            sub.add_argument("--worker", action="append", metavar="URL", help="a ready replica (repeated)")
    for name, handler, help_text in (
        ("router-leave", _router_leave, "this replica out of its router, drained, to stay out (router_worker.py)"),
        ("router-join", _router_join, "what runs on this replica back into its router (router_worker.py)"),
    ):
        sub = command(name, handler, help_text, spec=None)
        sub.add_argument("--dir", required=True, metavar="DIR", help="the releases directory")
        sub.add_argument("--router", required=True, metavar="URL", help="e.g. http://10.200.0.14:30000")
        sub.add_argument("--address", required=True, metavar="ADDR", help="the replica's address in its worker URLs")
        if name == "router-leave":
            sub.add_argument("--drain-s", type=float, default=60.0, metavar="S", help="drain deadline")
        else:
            sub.add_argument(
                "--wait-s", type=float, default=0.0, metavar="S", help="first wait up to S for a start under way"
            )
    sub = command("lock", _lock, "take the container's deploy lock for a whole run", spec=None)
    sub.add_argument("--dir", required=True, metavar="DIR", help="the releases directory")
    sub.add_argument("--token", type=_token, required=True, help="the run's token (unlock and --lease name it)")
    sub.add_argument("--owner", required=True, help="who runs it, e.g. alice@laptop (named to runs that wait)")
    sub.add_argument("--task", default="deploy", help="which task (named to runs that wait)")
    sub.add_argument("--wait", type=float, default=3600.0, metavar="S", help="seconds to wait for it (0: refuse)")
    sub.add_argument("--watch-pid", type=_pid, metavar="PID", help="release when PID ends (default: the sshd)")
    sub.add_argument("--max-hold", type=float, metavar="S", help="release after S seconds (default lease.MAX_HOLD_S)")
    sub.add_argument(
        "--expect", type=_count, metavar="N", help="only while the lock's count is N (the run read the container at it)"
    )
    sub.add_argument("--json", action="store_true", help='print {"held", "message"} and exit 0 (the fact)')
    sub = command("unlock", _unlock, "release the deploy lock this run holds", spec=None)
    sub.add_argument("--dir", required=True, metavar="DIR", help="the releases directory")
    sub.add_argument("--token", type=_token, required=True, help="the run's token")
    sub = command("holder", _holder, "who holds the deploy lock (its lease, null when free), taking nothing", spec=None)
    sub.add_argument("--dir", required=True, metavar="DIR", help="the releases directory")
    sub = command("compile", _compile, "write the zipapp's copy compiled for this interpreter (zipapp.py)", spec=None)
    sub.add_argument("--zipapp", default=contract.AGENT, metavar="PATH", help="the zipapp (default: %(default)s)")
    for name, handler, help_text in (
        ("apply", _apply, "record a release from the files on disk and switch to it"),
        ("switch", _switch, "switch to a recorded release: stop, GPUs free, start, gate; revert on failure"),
        ("transient", _transient, "the switch's steps for a configuration of the current release, recording nothing"),
        ("revert", _revert, "a TP group's rank back to what ran before its group's failed switch (switch.revert)"),
        ("releases", _releases, "the release records (and one release's file contents) as JSON"),
    ):
        sub = command(name, handler, help_text, spec=None)
        sub.add_argument("--dir", required=True, metavar="DIR", help="the releases directory")
        if name == "releases":
            sub.add_argument("--files-of", metavar="ID", help="include this release's file contents (base64) and lock")
            continue
        sub.add_argument("--lease", type=_token, metavar="T", help="this run holds the deploy lock (agent lock)")
        sub.add_argument("--detach", action="store_true", help="run in a transient unit a dropped SSH session leaves")
        sub.add_argument("--in-unit", type=_unit, metavar="UNIT", help=argparse.SUPPRESS)  # set by --detach
        if name == "transient":
            sub.add_argument("--server", type=_server, metavar="NAME", help="the configuration to run (default: none)")
            sub.add_argument("--spec-dir", default=DEFAULT_SPEC_DIR, metavar="DIR", help=f"default {DEFAULT_SPEC_DIR}")
            continue
        if name == "revert":
            sub.add_argument("--to", required=True, metavar="ID", help="the release that ran before the group's switch")
            sub.add_argument("--previous", metavar="ID", help="where a rollback goes again (as before the switch)")
            sub.add_argument("--why", default="its TP group's switch failed", help="the failure its release gets")
            continue
        sub.add_argument(
            "--no-revert",
            dest="revert",
            action="store_false",
            help="a TP group's rank: a failed start is not reverted here; its group reverts as one (revert)",
        )
        sub.add_argument("--keep", type=int, default=5, help="releases kept (default 5)")
        sub.add_argument("--router", metavar="URL", help="a replica: out of this router while it switches")
        sub.add_argument("--address", metavar="ADDR", help="with --router: the replica's address in its worker URLs")
        sub.add_argument("--drain-s", type=float, default=60.0, metavar="S", help="with --router: drain deadline")
        sub.add_argument("--venvs-dir", metavar="DIR", help="only venvs under DIR are removed with old releases")
        if name == "apply":
            sub.add_argument(
                "--spec", required=True, metavar="BASE64", help="the release (release_store.Store.record), JSON, base64"
            )
            sub.add_argument("--record-only", action="store_true", help="what runs is unchanged: no stop, no start")
        else:
            sub.add_argument("--to", required=True, metavar="ID", help="the release to run")
            sub.set_defaults(record_only=False)
    return parser
