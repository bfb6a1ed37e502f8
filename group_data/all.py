"""This repository's site choices, for every host: which server configurations exist and which one
runs. Everything else has the toolkit's default (sglang_pve/config/deployment.py HostData documents
each key: NCCL profiles, the SGLang pin, paths, limits, users, secrets); override it here, per
group (group_data/<group>.py), per host (inventory), or per run (`--data key=value`). Validated by
sglang_pve.config before any change; tests/unit/test_defaults.py fails if this file restates a
default of the model."""

# Server configurations (SGLang flag names: baseline, EAGLE-3 2/3/5-step) and which one runs.
servers_file = "group_data/servers.yml"
active_server = "baseline"
