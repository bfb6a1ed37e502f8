"""Per-rank GPU memory of a simulated server, phase by phase (GiB, as SGLang's "GB").

weights: checkpoint bytes / tp. KV pool: what is left of mem-fraction-static of the card after
weights (SGLang: avail - total * (1 - mem_fraction_static)), shared by target and draft per
token. Graph memory is a guess that grows with the number of captured batch sizes.
"""

from dataclasses import dataclass
from typing import List, Optional

from sglang.sim.gpu import TOTAL_GIB
from sglang.srt.model_config import ModelConfig
from sglang.srt.server_args import ServerArgs

GIB = 1 << 30


def capture_batch_sizes(max_bs: int) -> List[int]:
    """SGLang's decode graph batch sizes up to max_bs: 1, 2, 4, 8, 12, 16..256/8, 272..512/16."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 513, 16))
    return [bs for bs in sizes if bs <= max_bs] or [1]


@dataclass
class MemoryPlan:
    """GiB one rank uses for each part, and the KV pool's token count."""

    dist_init: float
    weights: float
    draft_weights: float
    kv_tokens: int
    kv: float
    draft_kv: float
    graph: float
    piecewise_graph: float
    draft_graph: float


def plan_memory(
    args: ServerArgs, target: ModelConfig, draft: Optional[ModelConfig], rank: int, graph_sizes: int
) -> MemoryPlan:
    """The memory plan of rank `rank`; kv_tokens <= 0 means the pool does not fit."""
    jitter = (rank * 7 % 5) * 0.01  # ranks differ by a few MB, as in real logs
    dist_init = 1.05 + jitter
    weights = target.checkpoint_bytes() / args.tp_size / GIB
    draft_weights = draft.checkpoint_bytes() / args.tp_size / GIB if draft else 0.0
    target_bytes = target.kv_bytes_per_token(args.tp_size, args.kv_cache_dtype)
    draft_bytes = draft.kv_bytes_per_token(args.tp_size, args.kv_cache_dtype) if draft else 0
    rest = TOTAL_GIB - dist_init - weights - draft_weights - TOTAL_GIB * (1 - args.mem_fraction_static)
    tokens = int(rest * GIB / (target_bytes + draft_bytes))
    if args.max_total_tokens:
        tokens = min(tokens, args.max_total_tokens)
    graphs = args.cuda_graph_enabled
    return MemoryPlan(
        dist_init=dist_init,
        weights=weights,
        draft_weights=draft_weights,
        kv_tokens=tokens,
        kv=max(tokens, 0) * target_bytes / GIB,
        draft_kv=max(tokens, 0) * draft_bytes / GIB,
        graph=(0.25 + 0.006 * graph_sizes) if graphs else 0.0,
        piecewise_graph=0.3 if graphs and args.cuda_graph_backend_prefill != "disabled" else 0.0,
        draft_graph=0.2 if graphs and draft else 0.0,
    )
