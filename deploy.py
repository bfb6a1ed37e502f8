"""The whole deploy, in order:  pyinfra inventory/prod.py deploy.py  (add --dry --diff to review).

Nodes first (prepared, their containers provisioned through the API), then every container's
deploy; sglang_pve/deploys/full.py says how. A user's own repository calls the same function.
"""

from sglang_pve.deploys.full import full_deploy

full_deploy()
