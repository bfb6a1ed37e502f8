"""The host's releases (sglang_pve/agent/release_store.py) in one remote command: the agent's report
(alone, or after the server units' state: UnitsAndReleases)."""

import base64
import json
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from sglang_pve.deploy import paths
from sglang_pve.deploy.facts import batched
from sglang_pve.deploy.facts.servers import ServerUnits


@dataclass(frozen=True)
class ReleaseReport:
    current: str | None = None  # id of the release that runs
    pending: str | None = None  # id of a release whose switch did not end (killed): what runs is unknown
    releases: list = field(default_factory=list)  # records, oldest first
    previous: str | None = None  # where a rollback goes by default
    running: list = field(default_factory=list)  # units of the current release that run
    target: str | None = None  # the release whose contents were asked for
    contents: dict = field(default_factory=dict)  # its files: path -> bytes (secret files never)
    secret_sha1: dict = field(default_factory=dict)  # its secret files: path -> sha1 (the content stays there)
    lock: str | None = None  # its lock
    error: str | None = None  # why the asked-for release has no contents (no such id, no previous)
    lease: dict | None = None  # the deploy lock's holder (agent/lease.py), None when free
    switch: dict | None = None  # the last detached switch's outcome (agent/detached.py), None before one
    ready: bool = False  # the current release's server passed its gate and runs (agent/switch.py ready)

    def get(self, release_id: str | None) -> dict | None:
        return next((r for r in self.releases if r["id"] == release_id), None)

    @property
    def current_record(self) -> dict | None:
        return self.get(self.current)


class Releases(FactBase[ReleaseReport]):
    """Release records, the current and previous ids, which units run, and (files_of: an id or
    "previous") one release's file contents and lock, of its secret files only their sha1;
    empty before the agent is installed.

    host.get_fact(Releases, files_of="previous").target  # "20261130T114354Z-3f2a9c1d"
    """

    @staticmethod
    def default() -> ReleaseReport:
        return ReleaseReport()

    def command(self, files_of=None):
        agent = shlex.quote(paths.AGENT)
        extra = f" --files-of {shlex.quote(files_of)}" if files_of else ""
        return f"if [ -f {agent} ]; then python3 {agent} releases --dir {shlex.quote(paths.RELEASES_DIR)}{extra}; fi"

    def process(self, output):
        text = "\n".join(output).strip()
        if not text:
            return ReleaseReport()
        document = json.loads(text)
        return ReleaseReport(
            current=document["current"],
            pending=document.get("pending"),
            releases=document["releases"],
            previous=document["previous"],
            running=document["running"],
            target=document.get("target"),
            contents={path: base64.b64decode(data) for path, data in (document.get("contents") or {}).items()},
            secret_sha1=document.get("secret_sha1") or {},
            lock=document.get("lock"),
            error=document.get("error"),
            lease=document.get("lease"),
            switch=document.get("switch"),
            ready=bool(document.get("ready")),
        )


class UnitsAndReleases(FactBase[tuple]):
    """ServerUnits and Releases in one command: what the release operation with `units` compares
    (deploy/operations/releases.py release).

    host.get_fact(UnitsAndReleases, paths=["/etc/systemd/system/sglang-baseline.service", ...],
                  units=["sglang-baseline.service"])
    # (ServersState(files={...}, installed={...}, units={...}), ReleaseReport(current="2026...", ...))
    """

    def command(self, paths, units):
        return batched.joined([ServerUnits().command(paths, units), Releases().command()])

    def process(self, output):
        units, report = batched.split_last(output)
        return ServerUnits().process(units), Releases().process(report or [])
