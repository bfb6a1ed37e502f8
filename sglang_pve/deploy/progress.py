"""Live progress while an operation's command waits: a switch's gate wait takes 30-90 minutes for a 1T
model, and pyinfra shows a command's output only once it ended (pyinfra-dev/pyinfra
pyinfra/connectors/util.py read_output_buffers: lines are queued, printed only with print_output,
i.e. -v, and then raw, unescaped).

So the command runs in a greenlet (pyinfra's connectors read their channels in gevent greenlets,
pyinfra_cli/__init__.py monkey.patch_all, so a second command on the same connection runs beside
it) and every INTERVAL_S seconds, until it ends, the host's `status --json` (the ServerStatus fact's
command) is read and one line logged through pyinfra's logger, without -v:

    [gpu1] progress: baseline weights 42 s, starting (weights, 42s); last: Load weight begin. ...

Plain lines on a terminal and in a pipe alike: no control codes of ours (on a terminal pyinfra's own
spinner, pyinfra/progress.py _print_spinner, clears its line before any log line); every value
from the host goes through printable().
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand

from sglang_pve.config.safe import printable
from sglang_pve.deploy.facts.server_status import ServerStatus
from sglang_pve.deploy.real_host import real_host

INTERVAL_S = 15.0  # issue 18: refreshed every 10-30 s
LAST_LINE_CHARS = 160

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Work(Protocol[T_co]):  # a gevent Greenlet
    def join(self, timeout: float | None = None) -> None: ...
    def ready(self) -> bool: ...
    def get(self) -> T_co: ...
    def kill(self) -> None: ...


def follow(work: "Work[T]", poll: Callable[[], str], emit: Callable[[str], None], interval: float | None = None) -> T:
    """Wait for `work`; every `interval` (INTERVAL_S) seconds while it runs, emit what `poll` says. Its result."""
    try:
        while True:
            work.join(timeout=INTERVAL_S if interval is None else interval)
            if work.ready():
                return work.get()
            emit(poll())
    finally:
        if not work.ready():  # an interrupt raised where we wait (the bench's SIGINT): the command goes too
            work.kill()


def line(server: str | None, report: dict | None) -> str:
    """One progress line for `server` from a `status --json` report (agent/status.py)."""
    if report is None:
        return "progress: the agent is not installed yet"
    records = [r for r in report.get("servers") or [] if r.get("server") == server]
    if not records:
        return f"progress: {printable(str(server))} is not among the host's servers yet"
    record = records[0]
    if "error" in record:
        return f"progress: {printable(str(server))}: {printable(str(record['error']))}"
    seconds = record.get("seconds_in_phase")
    last = printable(str(record.get("last_log_line") or ""))
    if len(last) > LAST_LINE_CHARS:
        last = last[: LAST_LINE_CHARS - 3] + "..."
    return (
        f"progress: {printable(str(server))} {printable(str(record.get('phase')))}"
        + (f" {seconds:.0f} s" if isinstance(seconds, (int, float)) else "")
        + f", {printable(str(record.get('verdict')))}; last: {last}"
    )


@dataclass(frozen=True)
class Watch:
    """What a followed command's progress is read from: `command` runs on the host beside it (same
    connection); `say(stdout_lines, seconds)` makes its line of that output and the seconds since the
    command began. `say` may raise ValueError/TypeError/AttributeError on output it cannot read."""

    command: str
    say: Callable[[list[str], float], str]


def status_watch(server: str | None) -> Watch:
    """A server's phase from the host's `status --json` (a switch's gate wait)."""
    fact = ServerStatus()
    return Watch(fact.command(), lambda lines, seconds: line(server, fact.process(lines)))


def _poll(host, watch: Watch, began: float) -> str:
    try:
        ok, output = host.run_shell_command(StringCommand(watch.command), print_output=False)
    except Exception as error:  # a lost connection: the command's own end reports it, the wait goes on
        return f"progress: reading it failed: {printable(f'{type(error).__name__}: {error}')}"
    if not ok:
        return f"progress: reading it failed: {printable(' '.join(output.stderr_lines)[-LAST_LINE_CHARS:])}"
    try:
        return watch.say(output.stdout_lines, time.monotonic() - began)
    except (ValueError, TypeError, AttributeError) as error:
        return f"progress: unreadable: {printable(str(error))}"


def _followed(host, run: Callable[[], T], watch: Watch) -> T:
    began = time.monotonic()
    return follow(gevent.spawn(run), lambda: _poll(host, watch, began), _logged(host))


class FollowedCommand(StringCommand):
    """A StringCommand (same text, same JSON cases) that logs progress while it runs: `server`'s
    phase, or what `watch` reads."""

    def __init__(self, *bits, server: str | None = None, watch: Watch | None = None, **kwargs):
        super().__init__(*bits, **kwargs)
        self.watch = watch or status_watch(server)

    def execute(self, state, host, connector_arguments):
        host = real_host(host)  # a nested operation (deploy_when_provisioned) or a python.call hands the proxy
        return _followed(
            host, lambda: super(FollowedCommand, self).execute(state, host, connector_arguments), self.watch
        )


def _logged(host) -> Callable[[str], None]:
    return lambda text: logger.info(f"{host.print_prefix}{text}")


def run_followed(host, command: StringCommand, server: str | None = None, watch: Watch | None = None):
    """host.run_shell_command(command) from code that runs at execution time (the bench's python.call),
    logging `server`'s progress (or what `watch` reads) while it runs; its (ok, output)."""
    host = real_host(host)  # a nested operation (deploy_when_provisioned) or a python.call hands the proxy
    return _followed(host, lambda: host.run_shell_command(command, print_output=False), watch or status_watch(server))
