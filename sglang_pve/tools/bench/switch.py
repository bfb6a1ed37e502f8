"""The seam between the benchmark and the server switch: a fresh start of one configuration.

Until the atomic switch of the releases work (tasks/switch.py) lands, a start is: stop the other
configurations (their ExecStopPost returns once the GPUs are free), then `systemctl restart
sglang-<name>`, which returns once the readiness gate (ExecStartPost) passed or failed, with the
agent's diagnosis in the status record. The explicit stop first matters: Conflicts= implies no
order, and a start racing the old server's drain found its port still bound (seen in the lab). `restart` also
restarts a configuration that was already running, so every
measured start is fresh (SGLang's avg_spec_accept_length counts from the start). Nothing here
reverts a failed start: the benchmark puts the previous configuration back itself, at the end.
"""

import json
import shlex
import time
from dataclasses import dataclass

from pyinfra.api import StringCommand

from sglang_pve.agent import systemd
from sglang_pve.deploy import paths


@dataclass(frozen=True)
class Start:
    server: str
    ok: bool
    seconds: float  # wall time of the start as the controller saw it (after the stop)
    stop_seconds: float  # stopping the configuration that ran (SGLang drains, GPUs verified free)
    record: dict  # the agent's status record of this start (phases, verdict, diagnosis)

    @property
    def diagnosis(self) -> str | None:
        verdict = self.record.get("verdict") or ""
        if self.ok:
            return None
        if verdict.startswith("failed: "):
            return verdict.removeprefix("failed: ")
        return verdict or "the start failed and the agent recorded no verdict (see the unit's journal)"


def status_record(host, server: str) -> dict:
    path = f"{paths.STATE_DIR}/status/{server}.json"
    ok, output = host.run_shell_command(StringCommand("cat", path), print_output=False)
    try:
        return json.loads(output.stdout) if ok else {}
    except ValueError:
        return {}


def start(host, server: str, others: list[str]) -> Start:
    """Stop `others`, then start `server` fresh and wait for its gate."""
    tic = time.monotonic()
    stop(host, [name for name in others if name != server])
    stopped = time.monotonic()
    ok, _ = host.run_shell_command(StringCommand("systemctl", "restart", paths.unit_name(server)), print_output=False)
    return Start(server, ok, time.monotonic() - stopped, stopped - tic, status_record(host, server))


def stop(host, servers: list[str]) -> None:
    if not servers:
        return
    units = " ".join(shlex.quote(paths.unit_name(s)) for s in servers)
    # A stop we asked for is no failure worth keeping (SGLang ends its drain with SIGKILL).
    host.run_shell_command(
        f"systemctl stop {units}; systemctl reset-failed {units} 2>/dev/null; true", print_output=False
    )


def active_server(host, servers: list[str]) -> str | None:
    """The configuration running now (at most one: the units conflict), or None."""
    units = [paths.unit_name(s) for s in servers]
    ok, output = host.run_shell_command(
        StringCommand("systemctl", "show", "-p", "Id,ActiveState", *units), print_output=False
    )
    running = [b["Id"] for b in systemd.parse_show(output.stdout) if b.get("ActiveState") in systemd.RUNNING]
    return running[0].removeprefix(paths.UNIT_PREFIX).removesuffix(".service") if ok and running else None
