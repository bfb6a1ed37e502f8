"""Options of the measurement tasks (tasks/bench.py, tasks/nccl_probe.py), from host data / --data.

    pyinfra inventory/lab.py tasks/bench.py --data configs=baseline,eagle3-3step --data sweep=1,4
    pyinfra inventory/lab.py tasks/bench.py --data promote=1
    pyinfra inventory/lab.py tasks/nccl_probe.py --data profiles=pcie-tuned,nccl-defaults --data write=1

On the command line a list is one comma-separated string (`configs=a,b`; pyinfra may also hand
over `sweep=1,4` as a tuple); both are accepted. Every problem is reported at once, naming host,
key, value and the fix, before anything runs.
"""

import re
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sglang_pve.config.deployment import Deployment
from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.problems import problems_from

_Options = TypeVar("_Options", bound=BaseModel)
_RUN_ID = re.compile(r"^(previous|[0-9TZ]{16}-[A-Za-z0-9._-]+)$")


def _split(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, (tuple, int)):
        return list(value) if isinstance(value, tuple) else [value]
    return value


class BenchOptions(BaseModel):
    """tasks/bench.py: what to measure, how long, and where the results go (on the controller)."""

    model_config = ConfigDict(extra="ignore")
    configs: list[str] | None = None  # default: every server configuration
    sweep: list[int] = []  # concurrency levels measured after the single-stream run
    output_len: int = Field(256, ge=2, le=32768)
    input_words: int = Field(200, ge=1, le=8000)
    num_prompts: int = Field(5, ge=1, le=1000)
    warmup: int = Field(2, ge=0, le=100)
    seed: int = 42
    compare: str | None = Field(None, pattern=_RUN_ID.pattern)  # an earlier run id, or "previous"
    bench_results_dir: str = "bench-results"
    promote: bool = False  # the winner beyond the noise becomes active_server (tools/bench/promote.py)
    # The workload's metric the winner is judged by: output tok/s at this concurrency (1: the
    # single-stream run; another level must be one of sweep).
    promote_by: int = Field(1, ge=1, le=1024)

    @field_validator("configs", "sweep", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split(value)

    @field_validator("sweep")
    @classmethod
    def _concurrency(cls, value: list[int]) -> list[int]:
        bad = [c for c in value if c < 2 or c > 1024]
        if bad:
            raise ValueError(f"concurrency levels are 2..1024 (1 is the single-stream run), got {bad[0]}")
        return value

    @model_validator(mode="after")
    def _measured_level(self) -> "BenchOptions":
        if self.promote_by != 1 and self.promote_by not in self.sweep:
            raise ValueError(
                f"promote_by={self.promote_by} is not a measured level: use 1 (single-stream) or add it to sweep"
            )
        return self


class ProbeOptions(BaseModel):
    """tasks/nccl_probe.py: candidates, trials and the workload mix the overall winner is judged by."""

    model_config = ConfigDict(extra="ignore")
    profiles: list[str] | None = None  # default: every profile in nccl_profiles
    rounds: int = Field(3, ge=1, le=20)  # fresh process groups per profile (the noise between inits)
    trials: int = Field(7, ge=2, le=100)
    iters: int = Field(20, ge=1, le=10000)
    probe_timeout_s: float = Field(180, gt=0, le=3600)
    max_bytes: int = Field(64 << 20, ge=1 << 20, le=1 << 30)
    write: bool = False  # write the overall winner as this host's nccl_profile (nccl_measured.yml)
    # What the host's GPUs spend their all-reduce time on, for the overall verdict (host data):
    # single-stream serving is mostly decode-sized (7168 x bf16 x batch) messages.
    nccl_workload_mix: dict[str, float] = {"decode": 0.8, "prefill": 0.2}

    @field_validator("profiles", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split(value)

    @field_validator("nccl_workload_mix")
    @classmethod
    def _mix(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - {"decode", "prefill"}
        if unknown or not any(weight > 0 for weight in value.values()) or any(w < 0 for w in value.values()):
            raise ValueError("a mix of decode and prefill weights >= 0, not all 0, e.g. {decode: 0.8, prefill: 0.2}")
        return value


def _validate(model: type[_Options], data: Mapping[str, object]) -> tuple[_Options | None, list[Problem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, problems_from(exc, model)


def _unknown(key: str, raw: object, known: list[str], what: str) -> list[Problem]:
    names = _split(raw) if raw is not None else []
    bad = [str(name) for name in names if name not in known] if isinstance(names, list) else []
    return [Problem(key, ",".join(bad), f"no such {what}", f"use some of {', '.join(known)}")] if bad else []


def bench_options(host_name: str, data: Mapping[str, object], deployment: Deployment) -> BenchOptions:
    options, problems = _validate(BenchOptions, data)
    problems += _unknown("configs", data.get("configs"), list(deployment.servers), "server configuration")
    if problems:
        raise ConfigError(host_name, problems)
    assert options is not None  # a failed validation added a problem
    return options


def probe_options(host_name: str, data: Mapping[str, object], deployment: Deployment) -> ProbeOptions:
    options, problems = _validate(ProbeOptions, data)
    problems += _unknown("profiles", data.get("profiles"), list(deployment.data.nccl_profiles), "NCCL profile")
    if problems:
        raise ConfigError(host_name, problems)
    assert options is not None  # a failed validation added a problem
    return options
