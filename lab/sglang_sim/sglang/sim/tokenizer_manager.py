"""The main process's request side (SGLang's TokenizerManager): submit, route outputs, health.

Requests go to scheduler TP0, outputs come back through the detokenizer; every output stamps
`last_receive_tstamp`, which is all SGLang's health check looks at.
"""

import itertools
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from sglang.sim import env
from sglang.sim.channels import Channels
from sglang.sim.histograms import Histograms
from sglang.srt.model_config import ModelConfig
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


class ServerStatus:
    STARTING = "Starting"
    UP = "Up"
    UNHEALTHY = "UnHealthy"


@dataclass
class GenerateSpec:
    """One generation: prompt identity (for deterministic output), sizes, streaming."""

    prompt_key: str
    input_tokens: int
    max_new_tokens: Optional[int]  # None: stop "naturally" (at a simulated EOS)
    stream: bool = False
    seed: Optional[int] = None
    greedy: bool = True


class TokenizerManager:
    """Submits generations to the scheduler and hands their outputs to HTTP handlers."""

    def __init__(self, args: ServerArgs, chans: Channels, model_config: ModelConfig, scheduler_info: dict):
        self.args, self.chans = args, chans
        self.model_config = model_config
        self.scheduler_info = scheduler_info
        self.context_len = scheduler_info["context_len"]
        self.server_status = ServerStatus.STARTING
        self.gracefully_exit = False
        self.last_receive_tstamp = 0.0
        self._queues: Dict[str, queue.Queue] = {}
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self.histograms = Histograms()
        threading.Thread(target=self._handle_loop, name="handle_loop", daemon=True).start()

    def inflight_rids(self) -> List[str]:
        with self._lock:
            return list(self._queues)

    def _handle_loop(self) -> None:
        while True:
            output = self.chans.to_tokenizer.get()
            self.last_receive_tstamp = time.time()
            with self._lock:
                out_queue = self._queues.get(output["rid"])
            if out_queue is not None:
                out_queue.put(output)

    def check_length(self, spec: GenerateSpec) -> None:
        """Refuse prompts that do not fit the context, like SGLang (wording is a guess)."""
        if spec.input_tokens >= self.context_len:
            raise ValueError(
                f"The input ({spec.input_tokens} tokens) is longer than the model's context "
                f"length ({self.context_len} tokens)."
            )
        if spec.max_new_tokens is not None and spec.input_tokens + spec.max_new_tokens > self.context_len:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.context_len} tokens. You requested a total of "
                f"{spec.input_tokens + spec.max_new_tokens} tokens: {spec.input_tokens} tokens "
                f"from the input messages and {spec.max_new_tokens} tokens for the completion. "
                "Please reduce the number of tokens in the input messages or the completion to "
                "fit within the limit."
            )

    def generate(self, specs: List[GenerateSpec]) -> Iterator[Tuple[int, dict]]:
        """Run `specs` as one batch; yield (index, output) until every one is done.

        An output is {"words": new words, "done": bool, "meta": {...} when done}.
        """
        out_queue: queue.Queue = queue.Queue()
        rids = [uuid.uuid4().hex for _ in specs]
        index = {rid: i for i, rid in enumerate(rids)}
        with self._lock:
            self._queues.update({rid: out_queue for rid in rids})
        try:
            submitted = time.monotonic()
            last: Dict[str, float] = {}  # each request's previous chunk
            for rid, spec in zip(rids, specs, strict=True):
                self._submit(rid, spec)
            pending = len(rids)
            while pending:
                output = out_queue.get()
                pending -= output["done"]
                self._observe(output, submitted, last)
                yield index[output["rid"]], output
        finally:
            with self._lock:
                for rid in rids:
                    self._queues.pop(rid, None)

    def _observe(self, output: dict, submitted: float, last: Dict[str, float]) -> None:
        """TTFT at a request's first chunk, ITL per later chunk (its interval over its new tokens),
        E2E at its end: where SGLang's tokenizer manager observes them (collector.py's histograms)."""
        now, rid, tokens = time.monotonic(), output["rid"], len(output["words"])
        if rid not in last:
            self.histograms.observe("time_to_first_token_seconds", now - submitted)
        elif tokens:
            self.histograms.observe("inter_token_latency_seconds", (now - last[rid]) / tokens, tokens)
        last[rid] = now
        if output["done"]:
            self.histograms.observe("e2e_request_latency_seconds", now - submitted)

    def _submit(self, rid: str, spec: GenerateSpec) -> None:
        exact = spec.max_new_tokens is not None
        sampled = not spec.greedy and spec.seed is None
        variant = next(self._counter) if sampled else spec.seed
        self.chans.to_scheduler.put(
            {
                "rid": rid,
                "seed_key": f"{spec.prompt_key}|{variant}",
                "input_tokens": spec.input_tokens,
                "max_new_tokens": spec.max_new_tokens if exact else self.context_len - spec.input_tokens,
                "exact": exact,
                "stream": spec.stream,
            }
        )

    def health_check(self, path: str) -> int:
        """SGLang's /health and /health_generate: 200 once anything comes back in time."""
        if self.gracefully_exit:
            logger.info("Health check request received during shutdown. Returning 503.")
            return 503
        if self.server_status == ServerStatus.STARTING:
            return 503
        if path == "/health" and not env.ENABLE_HEALTH_ENDPOINT_GENERATION.get():
            return 200
        timeout = env.HEALTH_CHECK_TIMEOUT.get()
        tic = time.time()
        rid = f"HEALTH_CHECK_{uuid.uuid4().hex}"
        with self._lock:
            self._queues[rid] = queue.Queue()
        try:
            self._submit(rid, GenerateSpec("HEALTH_CHECK", input_tokens=1, max_new_tokens=1))
            while time.time() < tic + timeout:
                time.sleep(1)
                if self.last_receive_tstamp > tic:
                    self.server_status = ServerStatus.UP
                    return 200
        finally:
            with self._lock:
                self._queues.pop(rid, None)
        logger.error(
            f"Health check failed. Server couldn't get a response from detokenizer for last "
            f"{timeout:g} seconds. tic start time: {time.strftime('%H:%M:%S', time.localtime(tic))}. "
            f"last_heartbeat time: "
            f"{time.strftime('%H:%M:%S', time.localtime(self.last_receive_tstamp))}"
        )
        self.server_status = ServerStatus.UNHEALTHY
        return 503
