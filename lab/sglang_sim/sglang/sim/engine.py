"""The launcher (SGLang's Engine + http_server.launch_server), in the main process.

Spawns one scheduler per TP rank and the detokenizer (multiprocessing spawn), waits for every
rank's ready message with no overall deadline (a hung rank keeps the port closed forever, as in
SGLang), then opens the HTTP port and runs the warm-up thread.

Multi-node (dist.py): each node runs its own TP ranks; only node rank 0 runs the detokenizer,
the tokenizer manager and the HTTP server. A node above rank 0 waits for its schedulers' ready
messages, starts SGLang's dummy health check server (GET /ping, /health, /health_generate: 200,
/metrics with --enable-metrics; uvicorn at level warning, so no access lines) and blocks until
its schedulers exit, as sgl-project/sglang python/sglang/srt/entrypoints/engine.py (commit
001067ff) Engine._launch_subprocesses does when node_rank >= 1, with
python/sglang/srt/utils/common.py launch_dummy_health_check_server.

Signals, as in SGLang:
- before HTTP: SIGQUIT from a failed child -> "Received sigquit from a child process. ..." and
  the whole tree is SIGKILLed; SIGTERM has its default action (children follow by PDEATHSIG).
- with HTTP up: SIGTERM -> "SIGTERM received. ... Draining requests and shutting down...",
  requests drain (polled every SGLANG_SIM_SIGTERM_POLL s), then the tree SIGKILLs itself;
  SIGINT -> uvicorn's graceful shutdown lines, children killed, exit 0; SIGQUIT -> running-phase
  message and tree kill. A child that dies while serving makes the launcher SIGQUIT itself.
"""

import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from typing import List, Tuple

from sglang.sim import env
from sglang.sim.channels import Channels
from sglang.sim.detokenizer import run_detokenizer_process
from sglang.sim.dist import local_tp_ranks
from sglang.sim.faults import Faults
from sglang.sim.http_server import DummyHealthServer, SimHTTPServer
from sglang.sim.logs import UVICORN_ERROR
from sglang.sim.phases import phase_durations
from sglang.sim.procutil import kill_process_tree
from sglang.sim.scheduler import run_scheduler_process
from sglang.sim.tokenizer_manager import ServerStatus, TokenizerManager
from sglang.sim.warmup import wait_and_warmup
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)
uvicorn_logger = logging.getLogger(UVICORN_ERROR)


def _launch_phase_sigquit_handler(signum, frame) -> None:
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree(os.getpid())


def _running_phase_sigquit_handler(signum, frame) -> None:
    logger.error(f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed.")
    kill_process_tree(os.getpid())


def _launch_subprocesses(args: ServerArgs, faults: Faults, chans: Channels) -> Tuple[list, list]:
    """Start the schedulers, then the detokenizer; return ([(proc, reader)], [all procs])."""
    ctx = mp.get_context("spawn")
    schedulers = []
    for tp_rank in local_tp_ranks(args.tp_size, args.nnodes, args.node_rank):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=run_scheduler_process,
            args=(args, tp_rank, faults, chans, writer),
            name=f"sglang::scheduler_TP{tp_rank}",
        )
        proc.start()
        writer.close()
        schedulers.append((proc, reader))
    if args.node_rank >= 1:
        return schedulers, [proc for proc, _ in schedulers]
    detokenizer = ctx.Process(target=run_detokenizer_process, args=(args.log_level, chans), name="sglang::detokenizer")
    detokenizer.start()
    return schedulers, [proc for proc, _ in schedulers] + [detokenizer]


def _wait_for_scheduler_ready(schedulers: list) -> dict:
    """Every rank's ready message (TP0's is returned); no overall timeout, like SGLang."""
    infos = []
    for rank, (proc, reader) in enumerate(schedulers):
        while True:
            if reader.poll(timeout=5.0):
                try:
                    data = reader.recv()
                    break
                except EOFError:
                    pass
            if not proc.is_alive():
                raise RuntimeError(
                    f"Rank {rank} scheduler died during initialization (exit code: "
                    f"{proc.exitcode}). If exit code is -9 (SIGKILL), a common cause is the OS "
                    "OOM killer. Run `dmesg -T | grep -i oom` to check."
                )
        if data.get("status") != "ready":
            raise RuntimeError("Initialization failed. Please see the error messages above.")
        infos.append(data)
    return infos[0]


def _watch_subprocesses(procs: List[mp.Process], tm: TokenizerManager, stop: threading.Event) -> None:
    """SGLang's SubprocessWatchdog: a dead child while serving brings the server down."""
    while not (tm.gracefully_exit or stop.is_set()):
        for proc in procs:
            if not proc.is_alive():
                # Guess at the wording of the watchdog's message.
                logger.error(f"Subprocess {proc.name} (pid {proc.pid}) died with exit code {proc.exitcode}.")
                os.kill(os.getpid(), signal.SIGQUIT)
                return
        time.sleep(1)


def _sigterm_watchdog(tm: TokenizerManager) -> None:
    """SGLang's sigterm_watchdog: after SIGTERM, drain the requests, then kill the tree."""
    poll = env.SIGTERM_POLL.get()
    while not tm.gracefully_exit:
        time.sleep(poll)
    while True:
        if tm.server_status == ServerStatus.UNHEALTHY:
            logger.error("Signal SIGTERM received while health check failed. Force exiting.")
            break
        remaining_rids = tm.inflight_rids()
        logger.info(
            f"Gracefully exiting... Remaining number of requests {len(remaining_rids)}. "
            f"Remaining requests {remaining_rids=}."
        )
        if not remaining_rids:
            break
        time.sleep(poll)
    kill_process_tree(os.getpid())


def _serve_nonzero_rank(args: ServerArgs, procs: List[mp.Process]) -> None:
    """A node above rank 0: the dummy health check server, then wait for the schedulers."""
    server = DummyHealthServer((args.host, args.port), args.enable_metrics)
    _start_thread(server.serve_forever)
    logger.info(f"Dummy health check server started in background thread at {args.host}:{args.port}")
    for proc in procs:
        proc.join()
        logger.error(f"Scheduler or DataParallelController {proc.pid} terminated with {proc.exitcode}")


def _start_thread(target, *args) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


def launch_server(args: ServerArgs, faults: Faults) -> None:
    """Run the server until it is stopped (see the module docstring for signals)."""
    durations = phase_durations(faults.phase_seconds)
    logger.info(f"server_args={args!r}")
    model_config = args.get_model_config()
    signal.signal(signal.SIGQUIT, _launch_phase_sigquit_handler)
    chans = Channels(mp.get_context("spawn"))
    schedulers, procs = _launch_subprocesses(args, faults, chans)
    scheduler_info = _wait_for_scheduler_ready(schedulers)
    if args.node_rank >= 1:
        _serve_nonzero_rank(args, procs)
        return
    tm = TokenizerManager(args, chans, model_config, scheduler_info)

    if faults.hangs_at("http"):
        threading.Event().wait()
    time.sleep(durations["http"])
    uvicorn_logger.info(f"Started server process [{os.getpid()}]")
    uvicorn_logger.info("Waiting for application startup.")

    def sigterm_handler(signum, frame):
        logger.warning(f"SIGTERM received. {signum=} {frame=}. Draining requests and shutting down...")
        tm.gracefully_exit = True

    signal.signal(signal.SIGTERM, sigterm_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # uvicorn handles Ctrl+C
    signal.signal(signal.SIGQUIT, _running_phase_sigquit_handler)
    _start_thread(_sigterm_watchdog, tm)
    stopping = threading.Event()
    _start_thread(_watch_subprocesses, procs, tm, stopping)
    uvicorn_logger.info("Application startup complete.")
    try:
        server = SimHTTPServer((args.host, args.port), tm)
    except OSError as e:
        uvicorn_logger.error(
            f"[Errno {e.errno}] error while attempting to bind on address "
            f"({args.host!r}, {args.port}): {(e.strerror or str(e)).lower()}"
        )
        sys.exit(1)
    uvicorn_logger.info(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    _start_thread(wait_and_warmup, tm, chans, faults, durations["warmup"])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        stopping.set()
        for line in (
            "Shutting down",
            "Waiting for application shutdown.",
            "Application shutdown complete.",
            f"Finished server process [{os.getpid()}]",
        ):
            uvicorn_logger.info(line)
