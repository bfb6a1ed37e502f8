"""What runs where:  pyinfra inventory/prod.py tasks/status.py

Per host the current release, per server configuration its state and verdict, the GPUs; changes
nothing. sglang_pve/deploys/status.py says what it shows."""

from sglang_pve.deploys.status import status

status()
