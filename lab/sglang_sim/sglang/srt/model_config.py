"""What SGLang reads from a model directory: config.json, the derived context length, sizes.

The context-length rule is SGLang's (`get_context_length` + `ModelConfig._derive_context_length`):
the first present key of CONTEXT_LENGTH_KEYS in the text config, times `rope_scaling.factor`
unless `original_max_position_embeddings` is in `rope_scaling` or its `rope_type` is llama3;
2048 when none is present. A requested length above the derived one raises SGLang's ValueError
unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set.
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from sglang.sim import env
from sglang.srt.remote_code import load_remote_config_class

logger = logging.getLogger(__name__)

CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)

# Guess: per-rank weight bytes when the model dir has neither safetensors files nor an index:
# Kimi-K2.5 INT4 is ~594 GB on disk, i.e. ~69 GiB per rank at TP 8.
DEFAULT_CHECKPOINT_BYTES = 594 * 10**9
# Guess: an EAGLE-3 head (one layer, plus fc and a pruned lm_head) when its size is unknown.
DEFAULT_DRAFT_CHECKPOINT_BYTES = 3 * 10**9
# Guess: Kimi-K2.5's INT4 checkpoint ships 64 shards.
DEFAULT_SHARD_COUNT = 64


def load_hf_config(model_path: str) -> dict:
    """Read `<model_path>/config.json` like transformers' AutoConfig does for a local dir.

    A missing directory or config.json fails with transformers' OSError wording (a guess at the
    exact text SGLang surfaces: it comes from `AutoConfig.from_pretrained`).
    """
    config_file = Path(model_path) / "config.json"
    if not config_file.is_file():
        raise OSError(
            f"Can't load the configuration of '{model_path}'. If you were trying to load it "
            "from 'https://huggingface.co/models', make sure you don't have a local directory "
            f"with the same name. Otherwise, make sure '{model_path}' is the correct path to a "
            "directory containing a config.json file"
        )
    with config_file.open() as f:
        return json.load(f)


def get_context_length(text_config: dict) -> int:
    """SGLang's derived context length of a (text) config."""
    rope_scaling = text_config.get("rope_scaling") or {}
    factor = rope_scaling.get("factor", 1) if rope_scaling else 1
    if "original_max_position_embeddings" in rope_scaling:
        factor = 1
    if rope_scaling.get("rope_type") == "llama3":
        factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        value = text_config.get(key)
        if value is not None:
            return int(factor * value)
    return 2048


def context_length_warning(context_length: int, derived: int, is_draft_model: bool) -> str:
    """SGLang's message for a requested context above the derived one (one line)."""
    reason = "Target model's" if is_draft_model else "User-specified"
    return (
        f"Warning: {reason} context_length ({context_length}) is greater than the derived "
        f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config."
    )


def context_length_error(context_length: int, derived: int, is_draft_model: bool) -> str:
    """The ValueError text SGLang raises without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN."""
    return (
        f"{context_length_warning(context_length, derived, is_draft_model)} To allow "
        "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )


@dataclass
class ModelConfig:
    """The parts of SGLang's ModelConfig the simulator needs, for the target or the draft."""

    model_path: str
    context_length: Optional[int] = None
    is_draft_model: bool = False
    trust_remote_code: bool = False
    hf_config: dict = field(init=False)
    context_len: int = field(init=False)

    def __post_init__(self):
        self.hf_config = load_hf_config(self.model_path)
        # get_config -> AutoConfig.from_pretrained: config.json's auto_map runs the folder's code here
        load_remote_config_class(self.hf_config, self.model_path, self.trust_remote_code)
        self.context_len = self._derive_context_length(self.context_length)

    @property
    def hf_text_config(self) -> dict:
        return self.hf_config.get("text_config") or self.hf_config

    @property
    def architecture(self) -> str:
        return (self.hf_config.get("architectures") or ["LlamaForCausalLM"])[0]

    @property
    def is_multimodal(self) -> bool:
        return "vision_config" in self.hf_config

    @property
    def model_type(self) -> Optional[str]:
        return self.hf_config.get("model_type")

    @property
    def derived_context_len(self) -> int:
        return get_context_length(self.hf_text_config)

    def _derive_context_length(self, context_length: Optional[int]) -> int:
        derived = self.derived_context_len
        if context_length is None:
            return derived
        if context_length > derived:
            msg = context_length_warning(context_length, derived, self.is_draft_model)
            if not env.ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.get():
                raise ValueError(context_length_error(context_length, derived, self.is_draft_model))
            logger.warning(msg)
            if self.is_draft_model:
                logger.warning(f"Overriding the draft model's max_position_embeddings to {context_length}.")
        return context_length

    def kv_bytes_per_token(self, tp_size: int, kv_cache_dtype: str) -> int:
        """KV-cache bytes one token takes on one rank (MLA: one latent per layer, replicated)."""
        cfg = self.hf_text_config
        elem = 1 if kv_cache_dtype.startswith("fp8") else 2
        layers = cfg.get("num_hidden_layers", 32)
        if cfg.get("kv_lora_rank"):
            return (cfg["kv_lora_rank"] + cfg.get("qk_rope_head_dim", 64)) * layers * elem
        heads = cfg.get("num_attention_heads", 32)
        head_dim = cfg.get("head_dim") or cfg.get("hidden_size", 4096) // heads
        kv_heads = max(1, cfg.get("num_key_value_heads", heads) // tp_size)
        return 2 * kv_heads * head_dim * layers * elem

    def checkpoint_bytes(self) -> int:
        """Total weight bytes: the safetensors index's total_size, the files, or a guess."""
        index = Path(self.model_path) / "model.safetensors.index.json"
        if index.is_file():
            with index.open() as f:
                total = json.load(f).get("metadata", {}).get("total_size")
            if total:
                return int(total)
        files = sum(p.stat().st_size for p in Path(self.model_path).glob("*.safetensors"))
        if files:
            return files
        return DEFAULT_DRAFT_CHECKPOINT_BYTES if self.is_draft_model else DEFAULT_CHECKPOINT_BYTES

    def shard_count(self) -> int:
        """Number of weight shards the loader's progress bar counts."""
        shards = list(Path(self.model_path).glob("*.safetensors"))
        if shards:
            return len(shards)
        index = Path(self.model_path) / "model.safetensors.index.json"
        if index.is_file():
            with index.open() as f:
                weight_map = json.load(f).get("weight_map", {})
            if weight_map:
                return len(set(weight_map.values()))
        return 1 if self.is_draft_model else DEFAULT_SHARD_COUNT

    def quant_method(self) -> Optional[str]:
        quant = self.hf_config.get("quantization_config") or self.hf_text_config.get("quantization_config")
        return quant.get("quant_method") if quant else None
