"""The sglang-pve local test lab: LXC system containers with fake GPUs on a host-only bridge.

See lab/README.md; run ``python -m lab up``.
"""
