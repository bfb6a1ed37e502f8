"""The container back to a Proxmox snapshot:  pyinfra inventory/prod.py tasks/rollback_snapshot.py

    --data snapshot=NAME   that snapshot (default: the newest)

Also tasks/rollback.py --data rollback=snapshot; sglang_pve/deploys/rollback.py says how."""

from sglang_pve.deploys.rollback import snapshot_rollback

snapshot_rollback()
