"""Which NCCL profile is fastest on this host:  pyinfra inventory/prod.py tasks/nccl_probe.py

    --data profiles=pcie-tuned,nccl-defaults   candidates (default: every profile in nccl_profiles)
    --data rounds=3 trials=7 iters=20 probe_timeout_s=180 max_bytes=67108864
    --data write=1                             the overall winner becomes this host's nccl_profile
                                               (group_data/nccl_measured.yml, read by the inventories)

Stop the server first: the probe needs the GPUs' memory. `--dry` changes nothing.
sglang_pve/deploys/nccl_probe.py says what it measures."""

from sglang_pve.deploys.nccl_probe import nccl_probe

nccl_probe()
