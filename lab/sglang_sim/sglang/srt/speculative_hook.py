"""SGLang's speculative-decoding resolution rules (`arg_groups/speculative_hook.py`).

EAGLE family (EAGLE, EAGLE3, NEXTN -> EAGLE, STANDALONE):
  - steps/topk/draft-tokens: all three or none. Steps unset asserts the other two are unset
    (AssertionError) and picks (3, 1, 4), or (5, 4, 8) for Llama targets; steps set without
    topk fails with the TypeError of `None > 1`.
  - topk == 1 forces draft tokens = steps + 1, with SGLang's warning.
  - max_running_requests defaults to 48, mixed chunked prefill is turned off.
  - DeepSeek-V3-family targets default the draft to their built-in MTP layer.
"""

import logging
import os
from typing import TYPE_CHECKING

from sglang.srt.model_config import ModelConfig

if TYPE_CHECKING:
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
# Guess: SGLang also accepts NGRAM, DFLASH, DSPARK and plugins; the simulator models EAGLE only.
KNOWN_ALGORITHMS = EAGLE_FAMILY + ("NEXTN",)
DEEPSEEK_MTP_ARCHS = (
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "MistralLarge3ForCausalLM",
)
PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")
MAX_RUNNING_REQUESTS_SPEC = 48


def handle_speculative_decoding(server_args: "ServerArgs") -> None:
    """Resolve the speculative flags in place (no-op without --speculative-algorithm)."""
    if server_args.speculative_draft_model_path and not server_args.speculative_draft_model_revision:
        server_args.speculative_draft_model_revision = "main"
    if server_args.speculative_algorithm is None:
        return
    server_args.speculative_algorithm = server_args.speculative_algorithm.upper()
    if os.getenv("SGLANG_ENABLE_SPEC_V2") is not None:
        logger.warning(
            "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 "
            "worker. Use --disable-overlap-schedule to select the non-overlap (synchronous) path."
        )
    if server_args.speculative_algorithm not in KNOWN_ALGORITHMS:
        # Guess at the wording of SpeculativeAlgorithm.from_string's error.
        raise ValueError(f"Unknown speculative algorithm: {server_args.speculative_algorithm}")
    if server_args.speculative_draft_model_path:
        # SGLang reads the draft's config here (_resolve_speculative_algorithm_alias).
        ModelConfig(
            server_args.speculative_draft_model_path,
            is_draft_model=True,
            trust_remote_code=server_args.trust_remote_code,
        )
    if server_args.speculative_algorithm == "NEXTN":
        server_args.speculative_algorithm = "EAGLE"
    _handle_eagle_family(server_args)


def _handle_eagle_family(server_args: "ServerArgs") -> None:
    if server_args.max_running_requests is None:
        server_args.max_running_requests = MAX_RUNNING_REQUESTS_SPEC
        logger.warning(
            "Max running requests is reset to 48 for speculative decoding. You can override "
            "this by explicitly setting --max-running-requests."
        )
    if server_args.disable_overlap_schedule:
        logger.warning("Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.")
    if server_args.enable_mixed_chunk:
        server_args.enable_mixed_chunk = False
        logger.warning("Mixed chunked prefill is disabled because of using eagle speculative decoding.")

    model_arch = server_args.get_model_config().architecture
    if model_arch in DEEPSEEK_MTP_ARCHS:
        if server_args.speculative_draft_model_path is None:
            server_args.speculative_draft_model_path = server_args.model_path
            server_args.speculative_draft_model_revision = server_args.revision
        else:
            logger.warning("DeepSeek MTP does not require setting speculative_draft_model_path.")

    if server_args.speculative_num_steps is None:
        assert server_args.speculative_eagle_topk is None and server_args.speculative_num_draft_tokens is None
        (
            server_args.speculative_num_steps,
            server_args.speculative_eagle_topk,
            server_args.speculative_num_draft_tokens,
        ) = (5, 4, 8) if model_arch == "LlamaForCausalLM" else (3, 1, 4)

    if (
        server_args.speculative_eagle_topk == 1
        and server_args.speculative_num_draft_tokens != server_args.speculative_num_steps + 1
    ):
        logger.warning(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        server_args.speculative_num_draft_tokens = server_args.speculative_num_steps + 1

    attention_backend = server_args.attention_backend or "triton"  # sm_120 MLA default
    # With topk unset this comparison raises SGLang's TypeError ('>' on None), on purpose.
    if (
        server_args.speculative_eagle_topk > 1
        and server_args.page_size > 1
        and attention_backend not in PAGE_TREE_SPEC_BACKENDS
    ):
        raise ValueError(
            f"speculative_eagle_topk > 1 with page_size > 1 is only supported on "
            f"{PAGE_TREE_SPEC_BACKENDS}; got attention_backend={attention_backend!r}. "
            "Use page_size == 1 or one of those backends."
        )
    if server_args.speculative_eagle_topk > 1 and not server_args.disable_overlap_schedule:
        # Notes section 1 rule 4: topk > 1 with the overlap scheduler errors out. Guess at the
        # wording (speculative_decoding.mdx only says it is rejected).
        raise ValueError(
            "Spec v2 with the overlap scheduler only supports speculative_eagle_topk == 1; "
            "set --speculative-eagle-topk 1 or --disable-overlap-schedule."
        )
    if server_args.speculative_use_rejection_sampling and server_args.speculative_eagle_topk != 1:
        raise ValueError("--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.")
