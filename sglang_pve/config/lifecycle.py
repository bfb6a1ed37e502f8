"""The `lifecycle:` block of a server configuration: deadlines and the liveness watchdog.

Never passed to SGLang; rendered into the unit (TimeoutStartSec=...) and into the agent's spec.
Defaults suit a 1T-parameter model on 8 GPUs; the lab inventory sets short ones.
"""

from pydantic import BaseModel, ConfigDict, Field, model_validator

_STRICT = ConfigDict(extra="forbid", strict=True)
Seconds = float


class StallTimeouts(BaseModel):
    """Longest time without log progress, per startup phase, before the start is declared stalled."""

    model_config = _STRICT
    dist_init: Seconds = Field(600, gt=0)
    weights: Seconds = Field(900, gt=0)  # shard bars move every few seconds to a minute
    kv_cache: Seconds = Field(300, gt=0)
    draft: Seconds = Field(900, gt=0)
    cuda_graph: Seconds = Field(1200, gt=0)
    http: Seconds = Field(300, gt=0)
    warmup: Seconds = Field(900, gt=0)  # SGLang's own warm-up request times out at 600 s


class Watchdog(BaseModel):
    """Liveness after ready: /health_generate every interval; `failures` in a row restart the unit."""

    model_config = _STRICT
    interval_s: Seconds = Field(30, gt=0)
    timeout_s: Seconds = Field(60, gt=0)  # above SGLang's 20 s detokenizer health timeout
    failures: int = Field(3, ge=1)
    max_restarts: int = Field(3, ge=0)
    window_s: Seconds = Field(3600, gt=0)
    backoff_s: Seconds = Field(30, ge=0)
    backoff_max_s: Seconds = Field(600, ge=0)


class Lifecycle(BaseModel):
    model_config = _STRICT
    startup_timeout_s: Seconds = Field(5400, gt=0)
    stop_timeout_s: Seconds = Field(90, gt=0)
    stall_timeout_s: StallTimeouts = StallTimeouts()
    watchdog: Watchdog = Watchdog()
    gpu_free_timeout_s: Seconds = Field(120, gt=0)
    gpu_idle_mib: int = Field(1024, ge=0)

    @model_validator(mode="after")
    def _startup_covers_a_phase(self):
        longest = max(self.stall_timeout_s.model_dump().values())
        if self.startup_timeout_s < longest:
            raise ValueError(f"startup_timeout_s ({self.startup_timeout_s}) is shorter than the longest stall timeout ({longest})")
        return self
