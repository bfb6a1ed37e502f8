"""SGLang's router of a replica set: its unit from its files, (re)started when they changed and up
before the operation ends (router_unit); its workers the set's ready replicas (router_workers)."""

from pyinfra import host, logger, state
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.exceptions import ConnectError, PyinfraError

from sglang_pve.config.safe import printable
from sglang_pve.deploy import paths
from sglang_pve.deploy.facts.router import RouterLeft, RouterStatus, RouterUnit
from sglang_pve.deploy.operations.files import ManagedFile, changed_files, converge

# Polls the router until `probe` answers 200 (sgl-model-gateway src/server.rs: GET /liveness once it
# serves, GET /readiness once a worker is healthy), within the deadline.
_WAIT = """\
import sys, time, urllib.request
url, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            if response.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"{url} did not answer 200 within {sys.argv[2]} s")
    time.sleep(0.5)
"""


@operation()
def router_unit(unit: str, files: list[ManagedFile], probe: str, timeout_s: float = 120):
    """
    Make the router's `unit` run from exactly `files`: written when they differ (then systemd
    reloads and the unit restarts), enabled, started when it does not run; then wait until
    `probe` answers 200.

    + unit: the unit's name, e.g. "sgl-router-kimi.service"
    + files: the unit file, its launcher and its key (deploy/render.py router_files)
    + probe: the URL that answers 200 once the router serves, e.g. "http://127.0.0.1:30000/liveness"
    + timeout_s: how long it may take

    **Example:**

    .. code:: python

        router_unit(unit="sgl-router-kimi.service", files=render.router_files(...),
                    probe="http://127.0.0.1:30000/liveness")
    """
    states, running = host.get_fact(RouterUnit, paths=[f.path for f in files], unit=unit)  # one read for both
    changed = changed_files(files, states)
    if not changed and running:
        host.noop(f"{unit} runs from its files")
        return
    yield from converge(files, states)
    if changed:
        yield StringCommand("systemctl", "daemon-reload")
    yield StringCommand("systemctl", "enable", "--quiet", QuoteString(unit))
    yield StringCommand("systemctl", "restart" if running else "start", QuoteString(unit))
    yield StringCommand("python3", "-c", QuoteString(_WAIT), QuoteString(probe), str(timeout_s))


@operation()
def router_workers(router: str, members: dict[str, str], key_file: str | None = None):
    """
    Make the router's workers exactly the set's ready replicas, through its worker API (the
    agent's router-sync): the members (host name: worker URL) that did not fail in this run, less
    a member the router does not list that is out of it on purpose (its RouterLeft mark: a bench
    of it runs, tools/bench/runner.py; a restart, provision/fleet_restart.py), read on that member.

    + router: the router's URL as its host reaches it, e.g. "http://127.0.0.1:30000"
    + members: every member's worker URL, by host name
    + key_file: the router's key on its host (the worker API wants it)

    **Example:**

    .. code:: python

        router_workers(router="http://127.0.0.1:30000", key_file="/etc/sglang/secrets/router-kimi.key",
                       members={"@pveguest/sglang1": "http://10.200.0.11:30000"})
    """
    failed = {h.name for h in getattr(state, "failed_hosts", ())}
    report = host.get_fact(RouterStatus, router=router, key_file=key_file)
    listed = sorted(w["url"] for w in (report or {}).get("workers", []))
    asked = {n: _left(n) for n, url in members.items() if n not in failed and url not in listed}  # the missing only
    away = {n: mark for n, mark in asked.items() if mark is not None}
    for name, mark in sorted(away.items()):
        logger.info(
            f"{host.print_prefix}{name} is out of router {router} on purpose since "
            + printable(f"{mark.get('since')} (agent router-leave: a bench, or a restart): not added back")
        )
    wanted = sorted(url for name, url in members.items() if name not in failed and name not in away)
    if report is not None and not report.get("error") and listed == wanted:
        host.noop(f"router {router} routes to {len(wanted)} ready replica(s)")
        return
    words = ["python3", "-I", QuoteString(paths.AGENT), "router-sync", "--router", QuoteString(router)]
    words += ["--key-file", QuoteString(key_file)] if key_file else []
    for url in wanted:
        words += ["--worker", QuoteString(url)]
    yield StringCommand(*words)


def _left(name: str) -> dict | None:
    """The RouterLeft mark of inventory host `name` (connected for it when this run leaves it out),
    or None: in its router, or not reachable (then the sync adds it when it serves, as before)."""
    inventory = getattr(state, "inventory", None)  # None: the operation driven without a run (tests)
    member = inventory.get_host(name, default=None) if inventory is not None else None
    if member is None:
        return None
    try:
        return member.get_fact(RouterLeft)
    except (ConnectError, PyinfraError, OSError) as error:
        logger.warning(f"{host.print_prefix}{name}: not read whether it is out of its router on purpose ({error})")
        return None
