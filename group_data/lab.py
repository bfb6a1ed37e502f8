"""What the lab (inventory/lab.py) does differently from production, and why."""

from lab.layout import API_KEY, BRIDGE_ADDRESS, INDEX_URL
from sglang_pve.agent.spec import STALL_PHASES

# The lab's own package index on the bridge serves the SGLang simulator under SGLang's real
# distribution name and pinned version; nothing else is reachable from the containers.
sglang_index_url = INDEX_URL
sglang_extra_index_urls = []
# It serves plain http on the lab's own bridge, which only the lab's containers share.
sglang_index_http_hosts = [BRIDGE_ADDRESS]
# The simulator's wheel needs no torch and no kernel, and the lab ships neither (a stand-in named
# like them would only prove that an import of an empty package works): it checks what it ships.
sglang_import_check = ["sglang", "yaml"]

# Root in the lab host lacks CAP_SYS_RESOURCE, so systemd inside the container cannot raise hard
# limits above the host's (nofile 20000, memlock 8 MiB here); production uses the defaults.
unit_limits = {"nofile": 16384, "memlock": "8M"}

# The simulator starts in seconds: deadlines short enough for tests to watch them fire.
lifecycle = {
    "startup_timeout_s": 120,
    "stop_timeout_s": 20,
    "stall_timeout_s": dict.fromkeys(STALL_PHASES, 10),
    "watchdog": {
        "interval_s": 2,
        "timeout_s": 3,
        "failures": 3,
        "max_restarts": 2,
        "window_s": 600,
        "backoff_s": 1,
        "backoff_max_s": 4,
    },
    "gpu_free_timeout_s": 15,
}

# The lab's servers bind 0.0.0.0 on the bridge, as production's do: with the api-key `lab up`
# made (0600, lab.credentials.ensure_api_key), read through the secret channel like any other, so
# `make demo` shows the secure default (401 without the key). A test that needs an open server
# says so: --data sglang_secrets={} --data allow_unauthenticated=true.
sglang_secrets = {"api-key": {"file": str(API_KEY)}}
# The simulator publishes its fake GPU use in /run/sglang-sim, which the sandboxed server may
# write only as its own runtime directory.
server_runtime_dirs = ["sglang-sim"]
# The lab host (the controller, on the bridge) is the servers' one client beyond the guest; pve1,
# the node, is not one: the unit's IP allow list (sglang_pve/deploy/sandbox.py ip_allow) leaves it out.
server_clients = [BRIDGE_ADDRESS]
