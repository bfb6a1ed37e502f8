"""Roll back:  pyinfra inventory/prod.py tasks/rollback.py --data rollback=MODE

    --data rollback=snapshot                      the container to its newest Proxmox snapshot
    --data rollback=snapshot --data snapshot=NAME  ... or to that one

This file only dispatches: each mode is a task file of its own (MODES).
"""

from pyinfra import host, local
from pyinfra.api.exceptions import PyinfraError

MODES = {"snapshot": "tasks/rollback_snapshot.py"}

mode = host.data.get("rollback")
if mode not in MODES:
    raise PyinfraError(f"{host.name}: rollback = {mode!r}: not a rollback mode. "
                       f"Fix: add --data rollback={'|'.join(MODES)}")
local.include(MODES[mode])
