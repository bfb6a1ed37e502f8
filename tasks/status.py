"""What runs where:  pyinfra inventory/prod.py tasks/status.py

Per host and server configuration: unit state, startup phase and time in it, health, restarts,
verdict (ready / starting / stalled / zombie since T / failed: why / stopped), last log line,
latest diagnosis, per-GPU memory and utilization, and any foreign process holding the GPUs.
One remote command per host; changes nothing.
"""

from pyinfra import host, logger

from sglang_pve.facts.status import ServerStatus
from sglang_pve.status_report import render

logger.info(render(host.name, host.get_fact(ServerStatus)))
