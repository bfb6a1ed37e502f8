"""Environment knobs: SGLang's own variables the simulator honours, and its own SGLANG_SIM_*.

SGLang's (same names and defaults as SGLang):
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN  warn instead of failing on a too-long context
  SGLANG_HEALTH_CHECK_TIMEOUT                seconds /health waits for the detokenizer (20)
  SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION   false: /health is a cheap 200 once up (true)
  SGLANG_WARMUP_TIMEOUT                      warm-up request timeout, -1 = 600 s (-1)
  SGLANG_LOG_MS                              milliseconds in the log timestamp (false)
  SGLANG_ENABLE_SPEC_V2                      removed upstream: only logs a warning if set
The simulator's:
  SGLANG_SIM_FAULTS          fault file (/etc/sglang-sim/faults.yaml)
  SGLANG_SIM_RUN_DIR         where simulated GPU use is published (/run/sglang-sim)
  SGLANG_SIM_DEV_DIR         where the nvidia device nodes are (/dev)
  SGLANG_SIM_PHASE_SECONDS   phase durations, e.g. "weights=30,cuda_graph=10"
  SGLANG_SIM_SIGTERM_POLL    period of SGLang's SIGTERM drain loop, seconds (5)
"""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class _Env:
    name: str
    default: str

    def raw(self) -> str:
        return os.environ.get(self.name, self.default)


class EnvBool(_Env):
    def get(self) -> bool:
        return self.raw().strip().lower() in ("1", "true", "yes", "on")


class EnvFloat(_Env):
    def get(self) -> float:
        return float(self.raw())


class EnvStr(_Env):
    def get(self) -> str:
        return self.raw()


ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = EnvBool("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "false")
HEALTH_CHECK_TIMEOUT = EnvFloat("SGLANG_HEALTH_CHECK_TIMEOUT", "20")
ENABLE_HEALTH_ENDPOINT_GENERATION = EnvBool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true")
WARMUP_TIMEOUT = EnvFloat("SGLANG_WARMUP_TIMEOUT", "-1")
LOG_MS = EnvBool("SGLANG_LOG_MS", "false")

FAULTS_FILE = EnvStr("SGLANG_SIM_FAULTS", "/etc/sglang-sim/faults.yaml")
RUN_DIR = EnvStr("SGLANG_SIM_RUN_DIR", "/run/sglang-sim")
DEV_DIR = EnvStr("SGLANG_SIM_DEV_DIR", "/dev")
PHASE_SECONDS = EnvStr("SGLANG_SIM_PHASE_SECONDS", "")
SIGTERM_POLL = EnvFloat("SGLANG_SIM_SIGTERM_POLL", "5")


def warmup_timeout() -> float:
    """SGLANG_WARMUP_TIMEOUT, where -1 (the default) means 600 s as in SGLang."""
    value = WARMUP_TIMEOUT.get()
    return 600.0 if value < 0 else value
