"""The arguments of the server: SGLang's flag names, defaults and resolution rules.

`prepare_server_args(argv)` parses a command line (with `--config FILE` merged in first, see
server_args_config_parser.py) into a `ServerArgs`; `ServerArgs.resolve_once()` applies the
rules SGLang applies before launching (speculative decoding, memory defaults), logging SGLang's
warnings. A preflight can call both exactly as it would call real SGLang:

    args = prepare_server_args(["--config", "/etc/sglang/servers/eagle3-2step.yaml"])
    args.resolve_once()   # AssertionError / ValueError / TypeError like SGLang on bad input
"""

import argparse
import dataclasses
import logging
import random
import re
from typing import List, Optional

from sglang.srt.model_config import ModelConfig
from sglang.srt.server_args_config_parser import ConfigArgumentMerger

logger = logging.getLogger(__name__)

LOAD_FORMAT_CHOICES = [
    "auto",
    "pt",
    "safetensors",
    "npcache",
    "dummy",
    "sharded_state",
    "gguf",
    "bitsandbytes",
    "layered",
    "remote",
    "remote_instance",
]
# Guess: subsets of SGLang's parser registries (the real lists are longer and change often).
REASONING_PARSER_CHOICES = [
    "deepseek-r1",
    "deepseek-v3",
    "glm45",
    "gpt-oss",
    "kimi",
    "kimi_k2",
    "minimax",
    "minimax-append-think",
    "qwen3",
    "qwen3-thinking",
    "step3",
]
TOOL_CALL_PARSER_CHOICES = [
    "deepseekv3",
    "deepseekv31",
    "glm",
    "glm45",
    "gpt-oss",
    "kimi_k2",
    "llama3",
    "mistral",
    "pythonic",
    "qwen",
    "qwen25",
    "qwen3_coder",
    "step3",
]
# Guess: backend names of #23906's split CUDA-graph flags.
CUDA_GRAPH_BACKEND_DECODE_CHOICES = ["full", "disabled"]
CUDA_GRAPH_BACKEND_PREFILL_CHOICES = ["piecewise", "disabled"]


def context_length_type(value: str) -> int:
    """`--context-length`: an int, or (since #20577) 128k / 128Ki.

    Guess: k = 1000 and Ki = 1024; pass plain ints to be independent of that.
    """
    match = re.fullmatch(r"(\d+)(k|K|Ki)?", value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid context length: {value!r}")
    number, suffix = int(match.group(1)), match.group(2)
    return number * {None: 1, "k": 1000, "K": 1000, "Ki": 1024}[suffix]


class DeprecatedAliasAction(argparse.Action):
    """A flag renamed by #23906: sets the new field(s) and warns.

    Its dest is the old name, so a YAML config using it is rejected by ConfigArgumentMerger
    (SGLang's merger refuses actions other than store/store_true). The class name in that
    error message is a guess.
    """

    def __init__(self, option_strings, dest, replacement, assign=None, **kwargs):
        kwargs.setdefault("nargs", 0 if assign else None)
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement
        self.assign = assign

    def __call__(self, parser, namespace, values, option_string=None):
        logger.warning(
            f"The argument '{option_string}' is deprecated and will be removed in a future "
            f"release; use '{self.replacement}' instead."
        )
        if self.assign:
            for name, value in self.assign.items():
                setattr(namespace, name, value)
        else:
            setattr(namespace, self.replacement.lstrip("-").replace("-", "_"), values)


@dataclasses.dataclass
class ServerArgs:
    """SGLang's server arguments (the subset the simulator knows), with SGLang's defaults."""

    # Model and tokenizer
    model_path: str
    tokenizer_path: Optional[str] = None
    tokenizer_mode: str = "auto"
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    model_loader_extra_config: str = "{}"
    trust_remote_code: bool = False
    context_length: Optional[int] = None
    revision: Optional[str] = None
    served_model_name: Optional[str] = None
    dtype: str = "auto"
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    chat_template: Optional[str] = None
    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False
    api_key: Optional[str] = None
    admin_api_key: Optional[str] = None
    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    enable_mixed_chunk: bool = False
    disable_overlap_schedule: bool = False
    page_size: int = 1
    attention_backend: Optional[str] = None
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_backend_decode: str = "full"
    cuda_graph_backend_prefill: str = "piecewise"
    # Parallelism and distribution
    tp_size: int = 1
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: Optional[str] = None
    dist_timeout: Optional[int] = None
    disable_custom_all_reduce: bool = False
    device: str = "cuda"
    random_seed: Optional[int] = None
    # Watchdogs
    watchdog_timeout: float = 300
    soft_watchdog_timeout: Optional[float] = None
    # Logging and observability
    log_level: str = "info"
    log_level_http: Optional[str] = None
    log_requests: bool = False
    decode_log_interval: int = 40
    enable_metrics: bool = False
    # API parsers
    reasoning_parser: Optional[str] = None
    tool_call_parser: Optional[str] = None
    # Speculative decoding
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_draft_model_revision: Optional[str] = None
    speculative_draft_load_format: Optional[str] = None
    speculative_draft_model_quantization: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0
    speculative_use_rejection_sampling: bool = False

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Register every flag with its canonical name, aliases and defaults."""
        d = ServerArgs
        a = parser.add_argument
        a("--config", type=str, help="Read CLI options from a YAML config file.")
        # Model and tokenizer
        a("--model-path", "--model", type=str, required=True, help="Model weights directory or HF id.")
        a("--tokenizer-path", type=str, default=d.tokenizer_path)
        a("--tokenizer-mode", type=str, default=d.tokenizer_mode, choices=["auto", "slow"])
        a("--skip-tokenizer-init", action="store_true")
        a("--load-format", type=str, default=d.load_format, choices=LOAD_FORMAT_CHOICES)
        a("--model-loader-extra-config", type=str, default=d.model_loader_extra_config)
        a("--trust-remote-code", action="store_true")
        a("--context-length", type=context_length_type, default=d.context_length)
        a("--revision", type=str, default=d.revision)
        a("--served-model-name", type=str, default=d.served_model_name)
        a("--dtype", type=str, default=d.dtype)
        a("--quantization", type=str, default=d.quantization)
        a("--kv-cache-dtype", type=str, default=d.kv_cache_dtype)
        a("--chat-template", type=str, default=d.chat_template)
        # HTTP server
        a("--host", type=str, default=d.host)
        a("--port", type=int, default=d.port)
        a("--skip-server-warmup", action="store_true")
        a("--api-key", type=str, default=d.api_key)
        a("--admin-api-key", type=str, default=d.admin_api_key)
        # Memory and scheduling
        a("--mem-fraction-static", type=float, default=d.mem_fraction_static)
        a("--max-running-requests", type=int, default=d.max_running_requests)
        a("--max-total-tokens", type=int, default=d.max_total_tokens)
        a("--chunked-prefill-size", type=int, default=d.chunked_prefill_size)
        a("--max-prefill-tokens", type=int, default=d.max_prefill_tokens)
        a("--schedule-policy", type=str, default=d.schedule_policy)
        a("--enable-mixed-chunk", action="store_true")
        a("--disable-overlap-schedule", action="store_true")
        a("--page-size", type=int, default=d.page_size)
        a("--attention-backend", type=str, default=d.attention_backend)
        a("--cuda-graph-max-bs-decode", type=int, default=d.cuda_graph_max_bs_decode)
        a(
            "--cuda-graph-backend-decode",
            type=str,
            default=d.cuda_graph_backend_decode,
            choices=CUDA_GRAPH_BACKEND_DECODE_CHOICES,
        )
        a(
            "--cuda-graph-backend-prefill",
            type=str,
            default=d.cuda_graph_backend_prefill,
            choices=CUDA_GRAPH_BACKEND_PREFILL_CHOICES,
        )
        a("--cuda-graph-max-bs", action=DeprecatedAliasAction, type=int, replacement="--cuda-graph-max-bs-decode")
        a(
            "--disable-cuda-graph",
            action=DeprecatedAliasAction,
            replacement="--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled",
            assign={"cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled"},
        )
        a(
            "--disable-piecewise-cuda-graph",
            action=DeprecatedAliasAction,
            replacement="--cuda-graph-backend-prefill disabled",
            assign={"cuda_graph_backend_prefill": "disabled"},
        )
        # Parallelism and distribution
        a("--tp-size", "--tensor-parallel-size", type=int, default=d.tp_size)
        a("--base-gpu-id", type=int, default=d.base_gpu_id)
        a("--gpu-id-step", type=int, default=d.gpu_id_step)
        a("--nnodes", type=int, default=d.nnodes)
        a("--node-rank", type=int, default=d.node_rank)
        a("--dist-init-addr", "--nccl-init-addr", type=str, default=d.dist_init_addr)
        a("--dist-timeout", type=int, default=d.dist_timeout)
        a("--disable-custom-all-reduce", action="store_true")
        a("--device", type=str, default=d.device)
        a("--random-seed", type=int, default=d.random_seed)
        # Watchdogs
        a("--watchdog-timeout", type=float, default=d.watchdog_timeout)
        a("--soft-watchdog-timeout", type=float, default=d.soft_watchdog_timeout)
        # Logging and observability
        a("--log-level", type=str, default=d.log_level)
        a("--log-level-http", type=str, default=d.log_level_http)
        a("--log-requests", action="store_true")
        a("--decode-log-interval", type=int, default=d.decode_log_interval)
        a("--enable-metrics", action="store_true")
        # API parsers
        a("--reasoning-parser", type=str, default=d.reasoning_parser, choices=REASONING_PARSER_CHOICES)
        a("--tool-call-parser", type=str, default=d.tool_call_parser, choices=TOOL_CALL_PARSER_CHOICES)
        # Speculative decoding
        a("--speculative-algorithm", type=str, default=d.speculative_algorithm)
        a(
            "--speculative-draft-model-path",
            "--speculative-draft-model",
            type=str,
            default=d.speculative_draft_model_path,
        )
        a("--speculative-draft-model-revision", type=str, default=d.speculative_draft_model_revision)
        a(
            "--speculative-draft-load-format",
            type=str,
            default=d.speculative_draft_load_format,
            choices=LOAD_FORMAT_CHOICES,
        )
        a("--speculative-draft-model-quantization", type=str, default=d.speculative_draft_model_quantization)
        a("--speculative-num-steps", type=int, default=d.speculative_num_steps)
        a("--speculative-eagle-topk", type=int, default=d.speculative_eagle_topk)
        a("--speculative-num-draft-tokens", type=int, default=d.speculative_num_draft_tokens)
        a("--speculative-accept-threshold-single", type=float, default=d.speculative_accept_threshold_single)
        a("--speculative-accept-threshold-acc", type=float, default=d.speculative_accept_threshold_acc)
        a("--speculative-use-rejection-sampling", action="store_true")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names if hasattr(args, name)})

    def resolve_once(self) -> None:
        """Apply SGLang's resolution rules once (later calls do nothing).

        Reads the target's (and the draft's) config.json, as SGLang's resolution does, so a
        missing model directory fails here with transformers' OSError.
        """
        if getattr(self, "_resolved", False):
            return
        from sglang.srt.speculative_hook import handle_speculative_decoding

        self.tokenizer_path = self.tokenizer_path or self.model_path
        self.served_model_name = self.served_model_name or self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        self.get_model_config()
        self._handle_gpu_memory_settings()
        handle_speculative_decoding(self)
        self._resolved = True

    def get_model_config(self) -> ModelConfig:
        """The target's ModelConfig (context check against the requested length included)."""
        return ModelConfig(
            self.model_path, context_length=self.context_length, trust_remote_code=self.trust_remote_code
        )

    def _handle_gpu_memory_settings(self) -> None:
        # Notes section 1: a 96 GB card falls in SGLang's "<160 GB" bucket.
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = 8192
        if self.cuda_graph_max_bs_decode is None:
            # Guess for tp < 4 (the notes give 512 for tp >= 4 on this card).
            self.cuda_graph_max_bs_decode = 512 if self.tp_size >= 4 else 256
        if self.mem_fraction_static is None:
            # Guess: SGLang's (gpu_mem - reserved) / gpu_mem with ~14 GiB reserved on 96 GB.
            self.mem_fraction_static = 0.85

    @property
    def is_speculative(self) -> bool:
        return self.speculative_algorithm is not None

    @property
    def cuda_graph_enabled(self) -> bool:
        return self.cuda_graph_backend_decode != "disabled"


def prepare_server_args(argv: List[str]) -> ServerArgs:
    """Parse `argv` (the words after `python -m sglang.launch_server`) into ServerArgs."""
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    if "--config" in argv:
        argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
    return ServerArgs.from_cli_args(parser.parse_args(argv))
