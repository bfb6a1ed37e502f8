"""Every agent spec the GPU tests use, built from the contract's defaults (sglang_pve/agent/spec.py's
Lifecycle dataclasses) with only what a short test changes: a key the contract adds reaches these
specs by itself, and tests/unit/test_gpu_specs.py runs each through the agent's own parser in CI
(two hand-written specs once lacked `stop_timeout_s` and failed only on a real GPU).

    agent_spec(tmp_path)   # {"server": "gputest", "unit": "sglang-gputest.service", ...}, as the deploy writes it
"""

import json
from dataclasses import asdict, replace
from pathlib import Path

from sglang_pve.agent import contract
from sglang_pve.agent import spec as spec_module

SERVER = "gputest"
UNIT = contract.unit_name(SERVER)


def agent_spec(tmp_path: Path) -> dict:
    """The spec of a unit `sglang-gputest.service` whose state and log live under tmp_path."""
    defaults = spec_module.Lifecycle()
    lifecycle = replace(
        defaults,
        startup_timeout_s=60,
        stall_timeout_s=replace(defaults.stall_timeout_s, **dict.fromkeys(spec_module.STALL_PHASES, 30)),
        watchdog=replace(
            defaults.watchdog, interval_s=5, timeout_s=5, max_restarts=1, window_s=60, backoff_s=0, backoff_max_s=0
        ),
        gpu_free_timeout_s=60,
    )
    return asdict(lifecycle) | {
        "server": SERVER,
        "unit": UNIT,
        "unit_prefix": contract.UNIT_PREFIX,
        "log": str(tmp_path / f"{SERVER}.log"),
        "host": "127.0.0.1",
        "port": 18000,
        "speculative": False,
        "state_dir": str(tmp_path / "state"),
        "diagnoses_dir": str(tmp_path / "state" / "diagnoses"),
    }


def write(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec))
    return path


# name -> builder, for tests/unit/test_gpu_specs.py: every spec a GPU test writes comes from here
SPECS = {"gputest": agent_spec}
