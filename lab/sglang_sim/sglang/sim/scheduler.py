"""A TP rank: SGLang's scheduler process, phase by phase, then its event loop.

Every rank logs its own startup lines (`[... TPn] ...`) and holds its GPU; TP0 alone draws the
progress bars and prints the scheduler-ready line; serving is in serving.py. Any exception is logged as
`Scheduler hit an exception: <traceback>` and the
parent gets SIGQUIT, as in SGLang. A `hang` fault stops a rank right after the begin line of
its phase (kv_cache has none: right after `Load weight end`), GPU idle, memory kept.
"""

import logging
import os
import signal
import threading
import time
import traceback

from sglang.sim.channels import Channels
from sglang.sim.dist import Rendezvous, local_gpu_id
from sglang.sim.faults import Faults
from sglang.sim.gpu import TOTAL_GIB, GpuHolder, physical_gpu
from sglang.sim.leak import spawn_leaked_child
from sglang.sim.logs import configure_logger
from sglang.sim.memory import capture_batch_sizes, plan_memory
from sglang.sim.perf import PerfModel
from sglang.sim.phases import phase_durations
from sglang.sim.procutil import kill_itself_when_parent_died, set_process_title
from sglang.sim.progress import ProgressBar
from sglang.sim.serving import serve
from sglang.srt.model_config import ModelConfig, context_length_error
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

CAPTURE_UTILIZATION = 97
LEAKED_GIB = 1.5  # what the leaked child keeps on TP0's GPU (a context plus a buffer; guess)
# Capture steps: share of the cuda_graph phase, log label, and whether every rank logs it.
GRAPH_SHARE = {"decode": 0.55, "piecewise": 0.25, "draft": 0.1, "draft_extend": 0.1}
GRAPH_LABELS = {
    "decode": ("Capture cuda graph", True),
    "piecewise": ("Capture piecewise CUDA graph", True),  # guess: v0.5.9-style wording
    "draft": ("Capture draft cuda graph", False),
    "draft_extend": ("Capture draft extend cuda graph", False),
}


class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError in tracebacks."""


OutOfMemoryError.__module__ = "torch"


def _forced_derived(requested: int, derived: int) -> int:
    """Fault crash=context_length: a derived length below the requested one (half if needed)."""
    return derived if derived < requested else requested // 2


class Scheduler:
    """One TP rank of a simulated SGLang server."""

    def __init__(self, args: ServerArgs, tp_rank: int, faults: Faults, chans: Channels):
        self.args, self.rank, self.faults, self.chans = args, tp_rank, faults, chans
        self.is_rank0 = tp_rank == 0
        self.parent_pid = os.getppid()
        self.durations = phase_durations(faults.phase_seconds)
        self.target = self._target_model_config()
        draft_path = args.speculative_draft_model_path
        self.draft_probe = (
            ModelConfig(draft_path, is_draft_model=True, trust_remote_code=args.trust_remote_code)
            if draft_path
            else None
        )
        max_bs = min(args.cuda_graph_max_bs_decode, args.max_running_requests or 1 << 20)
        self.graph_bs = capture_batch_sizes(max_bs) if args.cuda_graph_enabled else []
        self.plan = plan_memory(args, self.target, self.draft_probe, tp_rank, len(self.graph_bs))
        gpu_index = physical_gpu(local_gpu_id(tp_rank, args.tp_size, args.nnodes, args.base_gpu_id, args.gpu_id_step))
        self.dist = (
            Rendezvous(args.dist_init_addr, args.tp_size, tp_rank, args.dist_timeout) if args.nnodes > 1 else None
        )
        self.gpu = GpuHolder(gpu_index, role=f"scheduler_TP{tp_rank}")
        self.perf = PerfModel(args, os.environ, faults.decode_rate)
        # SGLang's default request-slot count when --max-running-requests is unset.
        self.max_running_requests = args.max_running_requests or min(
            max(int(max(self.plan.kv_tokens, 0) / self.target.context_len * 512), 2048), 4096
        )
        self.started = time.monotonic()

    # ---- startup -------------------------------------------------------------------------

    def _target_model_config(self) -> ModelConfig:
        if self.faults.crash == "context_length" and not self.args.is_speculative:
            derived = ModelConfig(
                self.args.model_path, trust_remote_code=self.args.trust_remote_code
            ).derived_context_len
            requested = self.args.context_length or derived
            raise ValueError(context_length_error(requested, _forced_derived(requested, derived), False))
        return self.args.get_model_config()

    def init_model_worker(self) -> dict:
        """Run the startup phases; return the ready message for the launcher."""
        self._dist_init()
        load_weights_time = self._load_weights()
        self._init_memory_pool()
        if self.args.is_speculative:
            self._init_draft_worker()
        self._capture_graphs()
        self._collective("ready")
        return self._ready_info(load_weights_time)

    def _sleep(self, phase: str, fraction: float = 1.0) -> None:
        time.sleep(self.durations[phase] * fraction)

    def _hang_if(self, phase: str) -> None:
        """Fault hang: stop here for good, GPU idle, memory as held so far."""
        if self.faults.hangs_at(phase):
            self.gpu.publish(utilization=0, phase=phase)
            threading.Event().wait()

    def _use(self, gib: float) -> None:
        self.gpu.publish(used_gib=self.gpu.used_gib + gib)

    def _dist_init(self) -> None:
        tic = time.monotonic()
        logger.info("Init torch distributed begin.")
        self.gpu.acquire()
        self.gpu.publish(used_gib=0.5, phase="dist_init")
        self._hang_if("dist_init")
        if self.dist is not None:
            self.dist.join()
        if self.args.tp_size > 2 and not self.args.disable_custom_all_reduce:
            logger.warning(
                "CustomAllreduce is disabled because it's not supported on more than two "
                "PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True "
                "explicitly."
            )
        self._sleep("dist_init")
        self.gpu.publish(used_gib=self.plan.dist_init)
        logger.info(
            f"Init torch distributed ends. elapsed={time.monotonic() - tic:.2f} s, "
            f"mem usage={self.plan.dist_init:.2f} GB"
        )

    def _load_weights(self) -> float:
        tic = time.monotonic()
        logger.info(f"Load weight begin. avail mem={self.gpu.avail_gib:.2f} GB")
        self.gpu.publish(phase="weights")
        self._hang_if("weights")
        if self.faults.leak_child and self.is_rank0:
            spawn_leaked_child(self.gpu.index, LEAKED_GIB)
        self._stream_weights(self.target, self.plan.weights, "weights", "Multi-thread loading shards")
        return self._log_weight_end(tic, self.target, self.plan.weights)

    def _stream_weights(self, model: ModelConfig, gib: float, phase: str, desc: str) -> None:
        """Load `gib` in shards over the phase's duration, TP0 drawing the shard bar."""
        shards = model.shard_count()
        bar = ProgressBar(shards, desc, shards=True) if self.is_rank0 else None
        for _ in range(shards):
            self._sleep(phase, 1 / shards)
            if self.gpu.used_gib + gib / shards > TOTAL_GIB - 0.25:
                raise OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {gib / shards:.2f} GiB. GPU "
                    f"{self.rank} has a total capacity of {TOTAL_GIB:.2f} GiB of which "
                    f"{max(self.gpu.avail_gib, 0) * 1024:.2f} MiB is free."
                )
            self._use(gib / shards)
            if bar:
                bar.update()
        if bar:
            bar.close()

    def _log_weight_end(self, tic: float, model: ModelConfig, gib: float) -> float:
        elapsed = time.monotonic() - tic
        quant = model.quant_method()
        kind = f"quant={quant}" if quant else "dtype=torch.bfloat16"
        logger.info(
            f"Load weight end. elapsed={elapsed:.2f} s, type={model.architecture}, {kind}, "
            f"avail mem={self.gpu.avail_gib:.2f} GB, mem usage={gib:.2f} GB."
        )
        return elapsed

    def _collective(self, name: str) -> None:
        """Where SGLang's startup waits for every rank (dist.py)."""
        if self.dist is not None:
            self.dist.barrier(name)

    def _init_memory_pool(self) -> None:
        self.gpu.publish(phase="kv_cache")
        self._hang_if("kv_cache")
        self._collective("kv_cache")  # the KV pool is sized by the minimum free memory over all ranks
        if self.plan.kv_tokens <= 0:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
        self._sleep("kv_cache")
        self._allocate_kv(self.plan.kv)

    def _allocate_kv(self, gib: float) -> None:
        self._use(gib)
        logger.info(f"KV Cache is allocated. #tokens: {self.plan.kv_tokens}, KV size: {gib:.2f} GB")
        logger.info(f"Memory pool end. avail mem={self.gpu.avail_gib:.2f} GB")

    def _init_draft_worker(self) -> None:
        """The draft's ModelConfig (context check), weights and KV pool."""
        if self.draft_probe is None:
            # Guess at the wording: the draft worker has no model to load.
            raise ValueError(
                f"speculative_algorithm={self.args.speculative_algorithm} requires "
                "--speculative-draft-model-path for this model architecture."
            )
        target_len = self.target.context_len
        if self.faults.crash == "context_length":
            derived = _forced_derived(target_len, self.draft_probe.derived_context_len)
            raise ValueError(context_length_error(target_len, derived, True))
        draft = ModelConfig(
            self.draft_probe.model_path,
            context_length=target_len,
            is_draft_model=True,
            trust_remote_code=self.args.trust_remote_code,
        )
        tic = time.monotonic()
        logger.info(f"Load weight begin. avail mem={self.gpu.avail_gib:.2f} GB")
        self.gpu.publish(phase="draft")
        self._hang_if("draft")
        self._stream_weights(draft, self.plan.draft_weights, "draft", "Loading safetensors checkpoint shards")
        self._log_weight_end(tic, draft, self.plan.draft_weights)
        self._allocate_kv(self.plan.draft_kv)

    def _capture_graphs(self) -> None:
        """Target decode graphs (all ranks), piecewise prefill graphs, draft graphs (TP0 logs)."""
        self.gpu.publish(phase="cuda_graph")
        if not self.graph_bs:
            self._hang_if("cuda_graph")
            return
        logger.info(
            f"Capture cuda graph begin. This can take up to several minutes. avail mem={self.gpu.avail_gib:.2f} GB"
        )
        self._hang_if("cuda_graph")
        self.gpu.publish(utilization=CAPTURE_UTILIZATION)
        self._collective("cuda_graph")  # a capture runs the forward's collectives
        steps = self._graph_steps()
        share_total = sum(GRAPH_SHARE[name] for name in steps)
        for name, gib in steps.items():
            tic, before = time.monotonic(), self.gpu.avail_gib
            fraction = GRAPH_SHARE[name] / share_total
            label, every_rank = GRAPH_LABELS[name]
            log = every_rank or self.is_rank0
            if name == "decode":
                self._capture_decode_graphs(gib, fraction)
            else:
                if log:
                    logger.info(f"{label} begin. This can take up to several minutes. avail mem={before:.2f} GB")
                self._sleep("cuda_graph", fraction)
                self._use(gib)
            if log:
                logger.info(
                    f"{label} end. Time elapsed: {time.monotonic() - tic:.2f} s. "
                    f"mem usage={before - self.gpu.avail_gib:.2f} GB. "
                    f"avail mem={self.gpu.avail_gib:.2f} GB."
                )
        self.gpu.publish(utilization=0)

    def _graph_steps(self) -> dict:
        """GiB per capture step, in SGLang's order; draft decode graphs need steps > 1."""
        steps = {"decode": self.plan.graph, "piecewise": self.plan.piecewise_graph}
        if self.args.is_speculative:
            steps["draft"] = self.plan.draft_graph / 2 if self.args.speculative_num_steps > 1 else 0
            steps["draft_extend"] = self.plan.draft_graph / 2
        return {name: gib for name, gib in steps.items() if gib}

    def _capture_decode_graphs(self, gib: float, fraction: float) -> None:
        """Capture every batch size, largest first, TP0 drawing tqdm's bar."""
        if self.is_rank0:
            logger.info(f"Capture cuda graph bs {self.graph_bs}")
        bar = ProgressBar(len(self.graph_bs)) if self.is_rank0 else None
        for bs in reversed(self.graph_bs):
            if bar:
                bar.set_description(f"Capturing batches (bs={bs} avail_mem={self.gpu.avail_gib:.2f} GB)")
            self._sleep("cuda_graph", fraction / len(self.graph_bs))
            self._use(gib / len(self.graph_bs))
            if bar:
                bar.update()
        if bar:
            bar.close()

    def _ready_info(self, load_weights_time: float) -> dict:
        context_len = self.target.context_len
        tokens = self.plan.kv_tokens
        max_running = self.max_running_requests
        if self.is_rank0:
            logger.info(
                f"max_total_num_tokens={tokens}, chunked_prefill_size={self.args.chunked_prefill_size}, "
                f"max_prefill_tokens={self.args.max_prefill_tokens}, max_running_requests={max_running}, "
                f"context_len={context_len}, available_gpu_mem={self.gpu.avail_gib:.2f} GB"
            )
        return {
            "status": "ready",
            "max_total_num_tokens": tokens,
            "max_running_requests": max_running,
            "max_req_input_len": context_len - 1,
            "context_len": context_len,
            "memory_usage": {
                "weight": round(self.plan.weights + self.plan.draft_weights, 2),
                "kvcache": round(self.plan.kv + self.plan.draft_kv, 2),
                "token_capacity": tokens,
                "graph": round(self.plan.graph + self.plan.piecewise_graph + self.plan.draft_graph, 2),
            },
            "load_weights_time": load_weights_time,
            "startup_time": time.monotonic() - self.started,
        }

    # ---- serving -------------------------------------------------------------------------

    def event_loop(self) -> None:
        """Serve until killed (see serving.py)."""
        self.gpu.publish(phase="serving")
        serve(self)


def run_scheduler_process(args: ServerArgs, tp_rank: int, faults: Faults, chans: Channels, pipe_writer) -> None:
    """Entry point of the `sglang::scheduler_TP<n>` process (multiprocessing spawn)."""
    kill_itself_when_parent_died()
    set_process_title(f"sglang::scheduler_TP{tp_rank}")
    configure_logger(args.log_level, prefix=f" TP{tp_rank}")
    parent = os.getppid()
    try:
        scheduler = Scheduler(args, tp_rank, faults, chans)
        pipe_writer.send(scheduler.init_model_worker())
        scheduler.event_loop()
    except Exception:
        logger.error(f"Scheduler hit an exception: {traceback.format_exc()}")
        os.kill(parent, signal.SIGQUIT)
