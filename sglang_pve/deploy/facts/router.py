"""A router's health, workers and own metrics, asked on its host by the agent (router_worker.status);
its unit's files and whether it runs, in one command (RouterUnit); on a replica, the mark that it
is out of its router on purpose (RouterLeft)."""

import json
import shlex

from pyinfra.api import FactBase

from sglang_pve.agent.contract import MARKER
from sglang_pve.deploy import paths
from sglang_pve.deploy.facts import batched
from sglang_pve.deploy.facts.files import digest_script, parse_digests
from sglang_pve.deploy.facts.units import UnitStates


class RouterStatus(FactBase[dict | None]):
    """{"url", "live", "ready", "workers": [{"url", "healthy", "load"}], "metrics": {...}, "error"};
    None where the agent is not installed yet.

    host.get_fact(RouterStatus, router="http://127.0.0.1:30000", metrics="http://127.0.0.1:29000/metrics",
                  key_file="/etc/sglang/secrets/router-kimi.key")["workers"]
    # [{"url": "http://10.200.0.11:30000", "healthy": True, "load": 0}, ...]
    """

    def command(self, router, metrics=None, key_file=None):
        words = ["python3", "-I", paths.AGENT, "router-status", "--router", router]
        words += ["--metrics", metrics] if metrics else []
        words += ["--key-file", key_file] if key_file else []
        return f"if [ -f {shlex.quote(paths.AGENT)} ]; then {' '.join(shlex.quote(w) for w in words)}; fi"

    def process(self, output):
        text = "\n".join(output).strip()
        return json.loads(text) if text else None


class RouterUnit(FactBase[tuple]):
    """What router_unit compares, in one command: FileDigests of the unit's files and whether the
    unit runs (UnitStates: SubState as pyinfra's SystemdStatus counts it, facts/units.py RUNNING).

    host.get_fact(RouterUnit, paths=["/etc/systemd/system/sgl-router-kimi.service", ...],
                  unit="sgl-router-kimi.service")
    # ({"/etc/systemd/system/sgl-router-kimi.service": FileState(...), ...}, True)
    """

    def command(self, paths, unit):
        return batched.joined([digest_script(list(paths)), UnitStates().command(units=[unit])])

    def process(self, output):
        digests, show = batched.split_last(output)
        units = UnitStates().process(show or [])
        return parse_digests(digests), any(info.running for info in units.values())


class RouterLeft(FactBase[dict | None]):
    """On a replica: the mark the agent's router-leave left (a bench, a restart provisioning owes),
    until router-join: {"router", "address", "since", "marker"}; None when it is in its router (no
    mark, or a file without the toolkit's marker).

    host.get_fact(RouterLeft)
    # {"router": "http://10.200.0.14:30000", "address": "10.200.0.12", "since": "2026-12-04T22:40:00Z", ...}
    """

    def command(self):
        return f"cat {shlex.quote(paths.ROUTER_LEFT)} 2>/dev/null || true"

    def process(self, output):
        try:
            mark = json.loads("\n".join(output))
        except ValueError:
            return None
        return mark if isinstance(mark, dict) and mark.get("marker") == MARKER else None
