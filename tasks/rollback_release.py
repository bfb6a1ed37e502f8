"""Roll back to a release:  pyinfra inventory/prod.py tasks/rollback_release.py (or tasks/rollback.py)

    (no data)              the previous release (rolling back twice changes nothing the second time)
    --data to=<id>         that release (ids: --data list=1)
    --data list=1          print the releases as a table; change nothing
    --dry --diff           show every file that would change, as unified diffs

sglang_pve/deploys/rollback.py says how."""

from sglang_pve.deploys.rollback import release_rollback

release_rollback()
