"""How fast the simulated server decodes, and how much EAGLE accepts.

Named configurations stream at a configured rate (SEED_RATES, the seed deployment's measured
single-stream figures, overridable per configuration in the fault file): each decode step takes
(tokens it emitted) / rate, so a client measures that rate whatever the acceptance of each
request was, and speculative steps accept 1 + a Bernoulli chain whose probability is solved
from the configured mean accept length. The rate holds with the tuned NCCL profile; fewer NCCL
variables slow it in proportion, as below. Other configurations use the step-cost model below.

Baseline single-stream decode of Kimi-K2.5 TP8 over PCIe: 63 tok/s with NCCL's defaults and
89 tok/s with the tuned NCCL profile (DESIGN.md; the toolkit's reason to persist NCCL_* for
every process). The rate is read from the scheduler's own environment, so a unit started
without the NCCL variables is measurably slower. Partial profiles interpolate; P2P disabled
costs 15 % (a guess).

EAGLE-3 (topk 1): each verify step accepts 1 + k draft tokens, k ~ a chain of Bernoulli(p)
successes capped at num_steps (p ~ 0.72 per request, a guess), so the mean accept length is
1 + p + ... + p^steps (2.2 / 2.6 / 3.1 for 2 / 3 / 5 steps). A step costs more than a plain
decode step (drafting plus verifying), 1.25 + 0.1 * steps times (a guess): 2, 3, 5 steps give
roughly 137, 150, 156 tok/s against 89. Batching slows each stream by 4 % per extra request.
"""

import random
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from sglang.srt.server_args import ServerArgs

NCCL_TUNING_VARS = (
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_P2P_LEVEL",
    "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
)
UNTUNED_TOK_S = 63.0
TUNED_TOK_S = 89.0
PREFILL_TOK_S = 4000.0
MEAN_ACCEPT_PROB = 0.72


@dataclass(frozen=True)
class DecodeRate:
    """A configuration's single-stream decode rate (tuned NCCL) and mean accept length."""

    tok_s: float
    accept_length: Optional[float] = None  # speculative configurations only


# The seed deployment's table (issue 10): baseline 82-83 tok/s, EAGLE-3 2-step 94.0, 5-step 86.7;
# 3-step was never measured there (its server became a zombie): 90.0 is a guess between them.
# Accept lengths are plausible guesses (Kimi-K2.5 EAGLE-3, topk 1).
SEED_RATES = {
    "baseline": DecodeRate(82.5),
    "eagle3-2step": DecodeRate(94.0, 2.2),
    "eagle3-3step": DecodeRate(90.0, 2.6),
    "eagle3-5step": DecodeRate(86.7, 3.1),
}

_WORDS = (
    "the model answers with a short and plausible sentence about cities rivers mountains "
    "history science music light water time people language numbers stars energy paris "
    "france capital between through during because however which would could also more"
).split()


def baseline_tok_s(environ: Mapping[str, str]) -> float:
    """Single-stream decode rate implied by the NCCL variables in `environ`."""
    tuned = sum(1 for name in NCCL_TUNING_VARS if environ.get(name)) / len(NCCL_TUNING_VARS)
    rate = UNTUNED_TOK_S + (TUNED_TOK_S - UNTUNED_TOK_S) * tuned
    if environ.get("NCCL_P2P_DISABLE") == "1":
        rate *= 0.85
    return rate


def count_prompt_tokens(text: str) -> int:
    """A tokenizer stand-in: one token per word plus BOS ("The capital city of France is" = 7)."""
    return len(text.split()) + 1


def accept_prob_for(accept_length: float, steps: int) -> float:
    """p such that the mean of 1 + a Bernoulli(p) chain capped at `steps` is `accept_length`
    (1 + p + ... + p^steps, increasing in p: bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid**i for i in range(steps + 1)) < accept_length:
            low = mid
        else:
            high = mid
    return low


class PerfModel:
    """Step timing and acceptance of one scheduler."""

    def __init__(self, args: ServerArgs, environ: Mapping[str, str], rate: Optional[DecodeRate] = None):
        self.decode_step_s = 1.0 / baseline_tok_s(environ)
        self.spec_steps = args.speculative_num_steps if args.is_speculative else 0
        topk = args.speculative_eagle_topk or 1
        # A wider tree accepts a little more per step (guess).
        self.accept_bonus = 0.03 * (topk - 1)
        self.tok_s = rate.tok_s * baseline_tok_s(environ) / TUNED_TOK_S if rate else None
        self.mean_accept_prob = MEAN_ACCEPT_PROB
        if rate and rate.accept_length and self.spec_steps:
            self.mean_accept_prob = accept_prob_for(rate.accept_length, self.spec_steps)

    @property
    def is_speculative(self) -> bool:
        return self.spec_steps > 0

    def step_seconds(self, emitted: Sequence[int]) -> float:
        """Wall time of one decode (or draft+verify) step that emitted `emitted` tokens for each
        running request."""
        batching = 1 + 0.04 * (len(emitted) - 1)
        if self.tok_s:
            return sum(emitted) / len(emitted) / self.tok_s * batching
        cost = 1.25 + 0.1 * self.spec_steps if self.spec_steps else 1.0
        return self.decode_step_s * cost * batching

    @staticmethod
    def prefill_seconds(tokens: int) -> float:
        return 0.02 + tokens / PREFILL_TOK_S

    def request_accept_prob(self, rng: random.Random) -> float:
        return min(0.95, max(0.3, rng.gauss(self.mean_accept_prob, 0.05) + self.accept_bonus))

    def tokens_per_step(self, rng: random.Random, accept_prob: float) -> int:
        """Tokens one step emits: 1 without speculation, else 1 + accepted draft tokens."""
        accepted = 0
        while accepted < self.spec_steps and rng.random() < accept_prob:
            accepted += 1
        return 1 + accepted


def generate_words(rng: random.Random, count: int) -> list:
    """`count` plausible-looking tokens (words), deterministic for a seeded `rng`."""
    return [rng.choice(_WORDS) for _ in range(count)]
