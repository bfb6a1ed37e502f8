"""The whole status of a host in one command: the agent's `status --json` report."""

import json

from pyinfra.api import FactBase

from sglang_pve.deploy import paths


class ServerStatus(FactBase[dict | None]):
    """Unit state, phase, health, restarts, verdict per server configuration, plus GPUs and
    holders of /dev/nvidia* (sglang_pve/agent/status.py documents the report). None where the
    agent is not installed yet.

    host.get_fact(ServerStatus)["servers"][0]["verdict"]  # "ready"
    """

    def command(self):
        return (
            f"if [ -f {paths.AGENT} ]; then python3 -I {paths.AGENT} status --json --spec-dir {paths.SERVERS_DIR}; fi"
        )

    def process(self, output):
        text = "\n".join(output).strip()
        return json.loads(text) if text else None
