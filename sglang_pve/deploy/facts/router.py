"""A router's health, workers and own metrics, asked on its host by the agent (router_worker.status);
its unit's files and whether it runs, in one command (RouterUnit)."""

import json
import shlex

from pyinfra.api import FactBase

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
