"""Roll back:  pyinfra inventory/prod.py tasks/rollback.py [--data rollback=MODE]

    (no mode, or rollback=release)                the previous release (tasks/rollback_release.py:
                                                  --data to=<release id>, --data list=1, --dry --diff)
    --data rollback=snapshot                      the container to its newest Proxmox snapshot
    --data rollback=snapshot --data snapshot=NAME  ... or to that one

sglang_pve/deploys/rollback.py says how each mode works."""

from sglang_pve.deploys.rollback import rollback

rollback()
