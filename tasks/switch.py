"""Switch the running configuration atomically:  pyinfra inventory/prod.py tasks/switch.py --data server=NAME

The next deploy.py switches back to the inventory's active_server. sglang_pve/deploys/switch.py says how."""

from sglang_pve.deploys.switch import switch

switch()
