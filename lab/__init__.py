"""The sglang-pve local test lab: a Proxmox node pve1 (API emulator, /etc/pve, pct) and its guests,
all LXC system containers with fake GPUs on a host-only bridge.

See lab/README.md; run ``python -m lab up``.
"""
