"""SGLang server flags a configuration may set, typed and range-checked.

Keys are SGLang's canonical dashed flag names, exactly as SGLang's own `--config` YAML takes them.
Only flags set by the user are rendered, so SGLang's own defaults apply to everything else.
Targets the pinned 0.5.16 nightly: flags that SGLang turned into deprecated aliases (2026-06-09)
are refused, since SGLang's YAML merger rejects alias actions.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sglang_pve.config.errors import Problem
from sglang_pve.config.safe import ModelRef, Text

_SECRET_SOURCE = "(a file or environment variable on the controller): keys never go into versioned configuration"
# Renamed or removed flags, with the replacement to tell the user.
RENAMED = {
    "cuda-graph-max-bs": "cuda-graph-max-bs-decode (renamed in SGLang 0.5.16)",
    "disable-cuda-graph": "cuda-graph-backend-decode: disabled and cuda-graph-backend-prefill: disabled",
    "disable-piecewise-cuda-graph": "cuda-graph-backend-prefill: disabled",
    "tensor-parallel-size": "tp-size",
    "model": "model-path",
    "speculative-draft-model": "speculative-draft-model-path",
    "nccl-init-addr": "dist-init-addr",
    "api-key": f"secrets.api-key {_SECRET_SOURCE}",
    "admin-api-key": f"secrets.admin-api-key {_SECRET_SOURCE}",
}
SECRET_FLAGS = ("api-key", "admin-api-key")  # refused here, never echoed; given through secrets:
MULTI_NODE_FLAGS = ("nnodes", "node-rank", "dist-init-addr")  # a TP group's, rendered per member


class SGLangArgs(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, alias_generator=lambda name: name.replace("_", "-"), populate_by_name=False
    )

    model_path: ModelRef
    tokenizer_path: ModelRef | None = None
    served_model_name: ModelRef | None = None
    trust_remote_code: bool | None = None
    load_format: Text | None = None
    quantization: Text | None = None
    kv_cache_dtype: Text | None = None
    context_length: int | None = Field(None, ge=1)
    # parallelism
    tp_size: int | None = Field(None, ge=1, le=64)
    dp_size: int | None = Field(None, ge=1, le=64)
    base_gpu_id: int | None = Field(None, ge=0)
    nnodes: int | None = Field(None, ge=1)
    node_rank: int | None = Field(None, ge=0)
    dist_init_addr: Text | None = None
    dist_timeout: int | None = Field(None, ge=1)
    # memory and scheduling
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    max_running_requests: int | None = Field(None, ge=1)
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = Field(None, ge=1)
    cuda_graph_max_bs_decode: int | None = Field(None, ge=1)
    cuda_graph_backend_decode: Text | None = None
    cuda_graph_backend_prefill: Text | None = None
    attention_backend: Text | None = None
    disable_custom_all_reduce: bool | None = None
    enable_nccl_nvls: bool | None = None
    enable_symm_mem: bool | None = None
    model_loader_extra_config: Text | None = None
    random_seed: int | None = None
    # serving
    host: Text | None = None
    port: int | None = Field(None, ge=1, le=65535)
    chat_template: Text | None = None
    reasoning_parser: Text | None = None
    tool_call_parser: Text | None = None
    skip_server_warmup: bool | None = None
    # observability and SGLang's own watchdogs
    log_level: Literal["debug", "info", "warning", "error", "critical"] | None = None
    log_level_http: Literal["debug", "info", "warning", "error", "critical"] | None = None
    enable_metrics: bool | None = None
    decode_log_interval: int | None = Field(None, ge=1)
    watchdog_timeout: float | None = Field(None, gt=0)
    soft_watchdog_timeout: float | None = Field(None, gt=0)
    # speculative decoding
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"] | None = None
    speculative_draft_model_path: ModelRef | None = None
    speculative_draft_model_quantization: Text | None = None
    speculative_num_steps: int | None = Field(None, ge=1, le=16)
    speculative_eagle_topk: int | None = Field(None, ge=1, le=16)
    speculative_num_draft_tokens: int | None = Field(None, ge=1, le=64)

    def as_flags(self) -> dict[str, object]:
        """The flags the user set, by their dashed names, in declaration order."""
        return self.model_dump(by_alias=True, exclude_unset=True)

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None


def check_supported(args: SGLangArgs, key: str) -> list[Problem]:
    """Settings SGLang accepts but the lifecycle agent cannot run: each refused with the reason."""
    problems = []
    if args.log_level in ("warning", "error", "critical"):
        problems.append(
            Problem(
                f"{key}.log-level",
                args.log_level,
                "SGLang prints its startup phase lines and the ready line at info level; at this "
                "level the readiness gate sees no progress and fails every start",
                "use info (the default) or debug",
            )
        )
    for flag in MULTI_NODE_FLAGS:
        if flag in args.as_flags():
            problems.append(
                Problem(
                    f"{key}.{flag}",
                    args.as_flags()[flag],
                    "set from the inventory for the members of a TP group (config/tp_group.py), never here: "
                    "a configuration is the same on every rank",
                    "remove it, and name the members in tp_groups",
                )
            )
    return problems


_SPEC_NUMBERS = ("speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens")


def check_speculative(args: SGLangArgs, key: str) -> list[Problem]:
    """SGLang's own speculative rules (its server_args checks), checked before anything loads."""
    flags = args.as_flags()
    numbers = {name: flags.get(name) for name in _SPEC_NUMBERS}
    if not args.speculative:
        stray = [n for n in (*_SPEC_NUMBERS, "speculative-draft-model-path") if flags.get(n) is not None]
        return [
            Problem(
                f"{key}.{n}", flags[n], "set without speculative-algorithm", "add speculative-algorithm or remove it"
            )
            for n in stray
        ]
    problems = []
    if args.speculative_algorithm in ("EAGLE", "EAGLE3") and not args.speculative_draft_model_path:
        problems.append(
            Problem(
                f"{key}.speculative-draft-model-path",
                None,
                f"{args.speculative_algorithm} needs a draft model "
                "(without one SGLang loads the target as draft and crashes after loading it twice)",
                "set speculative-draft-model-path",
            )
        )
    missing = [n for n, v in numbers.items() if v is None]
    steps = args.speculative_num_steps  # not None unless missing
    if missing:
        problems.append(
            Problem(
                f"{key}.{missing[0]}",
                None,
                "speculative-num-steps, -eagle-topk and -num-draft-tokens must all be set "
                "(SGLang asserts on partial sets)",
                f"set {', '.join(missing)}",
            )
        )
    elif steps is not None and args.speculative_eagle_topk == 1 and args.speculative_num_draft_tokens != steps + 1:
        problems.append(
            Problem(
                f"{key}.speculative-num-draft-tokens",
                args.speculative_num_draft_tokens,
                "with speculative-eagle-topk 1 SGLang overrides it to speculative-num-steps + 1",
                f"set it to {steps + 1}",
            )
        )
    return problems
