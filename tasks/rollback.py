"""Roll back:  pyinfra inventory/prod.py tasks/rollback.py [--data rollback=MODE]

    (no mode, or rollback=release)                the previous release (tasks/rollback_release.py:
                                                  --data to=<release id>, --data list=1, --dry --diff)
    --data rollback=snapshot                      the container to its newest Proxmox snapshot
    --data rollback=snapshot --data snapshot=NAME  ... or to that one

This file only dispatches: each mode is a task file of its own (MODES).
"""

from pyinfra import host, local
from pyinfra.api.exceptions import PyinfraError

MODES = {"release": "tasks/rollback_release.py", "snapshot": "tasks/rollback_snapshot.py"}

mode = host.data.get("rollback", "release")
if mode not in MODES:
    raise PyinfraError(
        f"{host.name}: rollback = {mode!r}: not a rollback mode. Fix: add --data rollback={'|'.join(MODES)}"
    )
local.include(MODES[mode])
