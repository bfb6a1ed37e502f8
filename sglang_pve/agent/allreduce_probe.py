"""All-reduce latency and bus bandwidth per NCCL profile, measured on the target.

Shipped to the target as one file (stdlib + the torch of SGLang's venv) and run with the venv's
python by tasks/nccl_probe.py:

    python nccl-probe.py --profiles profiles.json --out result.json [--trials 7] [--iters 20]

`profiles.json` is {"name": {"NCCL_VAR": "value", ...}, ...}. For each profile a fresh group of
processes (one per GPU) starts, because NCCL reads its variables once, at init. Each rank:

- drops every variable that any candidate profile sets, then sets its own profile's, so the
  deployed profile (the venv's startup hook runs at every interpreter start) cannot leak in;
  NCCL_CONF_FILE=/dev/null keeps /etc/nccl.conf out; NCCL_NVLS_ENABLE=0 and NCCL_CUMEM_ENABLE=0
  are defaulted as SGLang itself defaults them;
- all-reduces bf16 buffers at decode sizes (hidden 7168 x 2 bytes x batch 1..64) and prefill
  sizes (1 to 64 MiB): with NCCL, `iters` all-reduces are captured into one CUDA graph and each
  trial replays it between two CUDA events (no launch overhead, no Python in the timing); with
  gloo (no GPU: the CI path), a loop timed with perf_counter;
- per trial, the slowest rank's time per all-reduce counts (the collective ends with it).

--rounds fresh groups per profile, interleaved across profiles, pool their trials: on H200 x2 the
median at decode sizes moved by 30 % between two inits of the same profile while the replays of
one init agreed within 1 %, so the noise that matters is between inits.

The rendezvous (torch's TCPStore) listens on a loopback port the driver binds itself before any
rank starts (--port, 0: one the kernel picks), so nobody else holds it, and rank 0 serves the
store on that very socket (master_listen_fd). Every rank claims its slot with a proof keyed by a
secret of this run (in the ranks' environment, root-only), and checks every other slot's: a
process that reaches the store but is not one of this driver's ranks is refused before anything
is measured, so a local user cannot steer a result that --write would deploy.

A profile whose group does not finish within --timeout is killed (its process group, by the
PIDs this script started) and reported as hung; one that fails is reported with its last error
lines. The result is one JSON document (see `_result`); the analysis lives on the controller.
"""

import argparse
import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from torch import Tensor

HIDDEN = 7168
BF16_BYTES = 2
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
PREFILL_MIB = (1, 4, 16, 32, 64)
SGLANG_NCCL_DEFAULTS = {"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}  # set by SGLang if unset
LISTEN_FD, TOKEN = "SGLANG_PVE_PROBE_LISTEN_FD", "SGLANG_PVE_PROBE_TOKEN"  # driver -> ranks
REFUSED = 3  # a rank's exit status when a process that is not one of the ranks joined the rendezvous
Entry = dict[str, Any]  # a JSON document of the result (see _result)
Timer = Callable[[], float]  # seconds per all-reduce, one trial


def sizes(max_bytes: int) -> list[tuple[str, str, int]]:
    """[(regime, label, bytes)]: decode sizes first, then prefill sizes up to max_bytes."""
    out = [("decode", f"bs{batch}", HIDDEN * BF16_BYTES * batch) for batch in DECODE_BATCHES]
    out += [("prefill", f"{mib}MiB", mib << 20) for mib in PREFILL_MIB if mib << 20 <= max_bytes]
    return out


def profile_env(base: Mapping[str, str], profile: Mapping[str, object], scrub: Collection[str]) -> dict[str, str]:
    """The environment one profile's ranks start with."""
    env = {key: value for key, value in base.items() if key not in scrub}
    env.update({key: str(value) for key, value in profile.items()})
    env["NCCL_CONF_FILE"] = os.devnull
    for key, value in SGLANG_NCCL_DEFAULTS.items():
        env.setdefault(key, value)
    return env


# ---- one rank ------------------------------------------------------------------------------


def _rank_main(args: argparse.Namespace) -> int:
    profile = json.loads(args.profile_json)
    for key in json.loads(args.scrub_json):  # the venv's startup hook set them at interpreter start
        os.environ.pop(key, None)
    os.environ.update({key: str(value) for key, value in profile.items()})
    os.environ["NCCL_CONF_FILE"] = os.devnull

    token = os.environ.pop(TOKEN, "")
    listen_fd = os.environ.pop(LISTEN_FD, None)

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = args.backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    store = dist.TCPStore(  # type: ignore[attr-defined]  # torch re-exports it from its C extension
        "127.0.0.1",
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=rank == 0,
        master_listen_fd=int(listen_fd) if rank == 0 and listen_fd is not None else None,
        wait_for_workers=False,
    )
    stranger = check_peers(store, rank, world, token.encode(), os.getppid())
    if stranger:
        print(f"nccl-probe: refused: {stranger}; nothing measured", file=sys.stderr, flush=True)
        return REFUSED
    dist.init_process_group(args.backend, store=store, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    # gloo has no bf16 all-reduce everywhere: same bytes in float32.
    dtype, itemsize = (torch.bfloat16, 2) if cuda else (torch.float32, 4)
    rows = []
    for regime, label, nbytes in sizes(args.max_bytes):
        buf = torch.zeros(nbytes // itemsize, dtype=dtype, device=device)
        if cuda:
            time_one, timing = _cuda_timer(torch, dist, buf, args.iters)
        else:
            time_one, timing = _loop_timer(dist, buf, args.iters), "perf_counter loop"
        trials = []
        for _ in range(args.trials):
            dist.barrier()
            seconds = time_one()
            slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            trials.append(slowest.item() * 1e6)
        rows.append({"regime": regime, "label": label, "bytes": nbytes, "timing": timing, "trials_us": trials})
        del buf, time_one
    if rank == 0:
        info = {
            "backend": args.backend,
            "world_size": world,
            "torch": torch.__version__,
            # torch.cuda.nccl.version has no annotations
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,  # type: ignore[no-untyped-call]
            "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "sizes": rows,
        }
        with open(args.result, "w", encoding="utf-8") as handle:
            json.dump(info, handle)
    dist.destroy_process_group()
    return 0


def proof(token: bytes, rank: int, pid: int) -> str:
    return hmac.new(token, f"{rank}:{pid}".encode(), hashlib.sha256).hexdigest()


def check_peers(store: Any, rank: int, world: int, token: bytes, driver: int) -> str | None:
    """Claim this rank's slot in the store, then check every slot: each must be claimed by a child
    of `driver` with the proof of this run's token. What is wrong, or None."""
    mine = json.dumps({"pid": os.getpid(), "proof": proof(token, rank, os.getpid())})
    held = store.compare_set(f"peer/{rank}", "", mine).decode()  # set only if nobody has it
    if held != mine:
        return f"rank {rank}'s slot at the rendezvous was taken by another process ({held[:120]!r})"
    for other in range(world):
        try:
            claim = json.loads(store.get(f"peer/{other}"))
            pid, shown = int(claim["pid"]), str(claim["proof"])
        except (ValueError, KeyError, TypeError):
            return f"rank {other} joined the rendezvous without a claim of this probe"
        if not hmac.compare_digest(shown, proof(token, other, pid)) or _parent(pid) != driver:
            return f"rank {other} at the rendezvous (pid {pid}) is not one of this probe's ranks"
    return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])  # comm may hold blanks and ')'
    except (OSError, ValueError, IndexError):
        return None


def rendezvous_socket(port: int) -> socket.socket:
    """A listening loopback socket for the store, bound here first: the port is verified free (0:
    the kernel picks one) and held until rank 0 serves the store on it. OSError: in use."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only: never a live listener
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _cuda_timer(torch: ModuleType, dist: ModuleType, buf: "Tensor", iters: int) -> tuple[Timer, str]:
    """The CUDA-graph timer; eager all-reduces between CUDA events where capture fails (reported)."""
    try:
        return _graph_timer(torch, dist, buf, iters), "cuda graph"
    except RuntimeError as error:
        print(f"CUDA graph capture failed, timing eager all-reduces: {error}", file=sys.stderr, flush=True)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def time_one() -> float:
            start.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            elapsed_ms: float = start.elapsed_time(end)
            return elapsed_ms / 1e3 / iters

        return time_one, "eager cuda events"


def _graph_timer(torch: ModuleType, dist: ModuleType, buf: "Tensor", iters: int) -> Timer:
    """`iters` all-reduces captured in one CUDA graph; returns a function timing one replay."""
    for _ in range(3):  # eager warm-up: the communicator and its buffers exist before capture
        dist.all_reduce(buf)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_reduce(buf)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            dist.all_reduce(buf)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_one() -> float:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        elapsed_ms: float = start.elapsed_time(end)
        return elapsed_ms / 1e3 / iters

    return time_one


def _loop_timer(dist: ModuleType, buf: "Tensor", iters: int) -> Timer:
    for _ in range(2):
        dist.all_reduce(buf)

    def time_one() -> float:
        tic = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        return (time.perf_counter() - tic) / iters

    return time_one


# ---- the driver: one fresh process group per profile ----------------------------------------


def _run_profile(
    name: str, profile: Mapping[str, object], scrub: list[str], args: argparse.Namespace, world: int, port: int
) -> Entry:
    listener = rendezvous_socket(port)
    env = profile_env(dict(os.environ), profile, scrub)
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(listener.getsockname()[1]),
        WORLD_SIZE=str(world),
        **{TOKEN: secrets.token_hex(32)},
    )
    workdir = tempfile.mkdtemp(prefix="nccl-probe-")
    result = os.path.join(workdir, "result.json")
    common = [
        sys.executable,
        os.path.abspath(__file__),
        "--rank-mode",
        "--backend",
        args.backend,
        "--trials",
        str(args.trials),
        "--iters",
        str(args.iters),
        "--max-bytes",
        str(args.max_bytes),
        "--profile-json",
        json.dumps(profile),
        "--scrub-json",
        json.dumps(scrub),
        "--result",
        result,
    ]
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[TextIO] = []
    for rank in range(world):
        log: TextIO = open(os.path.join(workdir, f"rank{rank}.log"), "w+", encoding="utf-8")
        logs.append(log)
        held = {LISTEN_FD: str(listener.fileno())} if rank == 0 else {}
        procs.append(
            subprocess.Popen(
                common,
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), **held},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(listener.fileno(),) if rank == 0 else (),
            )
        )
        if rank == 0:
            listener.close()  # rank 0 holds the socket now
    tic = time.monotonic()
    deadline = tic + args.timeout
    refused = False
    while time.monotonic() < deadline and any(p.poll() is None for p in procs) and not refused:
        time.sleep(0.2)
        refused = any(p.poll() == REFUSED for p in procs)  # the others wait for it: end them too
    hung = not refused and any(p.poll() is None for p in procs)
    for proc in procs:  # our own children, each leading its own process group
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    entry: Entry = {
        "env": {key: str(value) for key, value in profile.items()},
        "seconds": round(time.monotonic() - tic, 1),
    }
    if hung:
        entry.update(status="hung", error=f"no result within {args.timeout:g}s; ranks killed")
    elif refused:
        said = _tail(logs, lines=2, only="nccl-probe: refused: ")  # the refusing rank's words, not its peers' crash
        entry.update(status="failed", error=f"refused at the rendezvous: {said}")
    elif any(p.returncode for p in procs) or not os.path.exists(result):
        codes = ", ".join(f"rank{r}={p.returncode}" for r, p in enumerate(procs))
        entry.update(status="failed", error=f"exit codes {codes}: {_tail(logs)}")
    else:
        with open(result, encoding="utf-8") as handle:
            entry.update(status="ok", **json.load(handle))
    for log in logs:
        log.close()
    return entry


def _tail(logs: list[TextIO], lines: int = 6, only: str = "") -> str:
    text: list[str] = []
    for log in logs:
        log.seek(0)
        text += [line.rstrip() for line in log.read().splitlines() if line.strip() and only in line]
    return " | ".join(text[-lines:])[-800:]


def _merge(entry: Entry | None, new: Entry) -> Entry:
    """Pool one more round (fresh process group) into a profile's entry: trials appended, round
    medians kept; a round that hung or failed makes the profile hung/failed, with its error."""
    if new["status"] != "ok" or (entry is not None and entry["status"] != "ok"):
        return entry if entry is not None and entry["status"] != "ok" else new
    if entry is None:
        for row in new["sizes"]:
            row["round_medians_us"] = [sorted(row["trials_us"])[len(row["trials_us"]) // 2]]
        return new
    for row, more in zip(entry["sizes"], new["sizes"], strict=True):
        row["trials_us"] += more["trials_us"]
        row["round_medians_us"].append(sorted(more["trials_us"])[len(more["trials_us"]) // 2])
    entry["seconds"] = round(entry["seconds"] + new["seconds"], 1)
    return entry


def _result(profiles: Mapping[str, Mapping[str, object]], args: argparse.Namespace, world: int) -> Entry:
    """Rounds x profiles, interleaved (A B C, A B C, ...): every round is a fresh process group, so
    the spread includes what changes between inits (rings, channels, clocks), not only between
    replays of one graph; drift over time hits every profile alike."""
    scrub = sorted({key for profile in profiles.values() for key in profile if key.startswith("NCCL_")})
    out: Entry = {
        "host": os.uname().nodename,
        "backend": args.backend,
        "world_size": world,
        "rounds": args.rounds,
        "trials": args.trials,
        "iters": args.iters,
        "started": time.time(),
        "profiles": {},
    }
    port = args.port
    for round_ in range(1, args.rounds + 1):
        for index, (name, profile) in enumerate(profiles.items()):
            if out["profiles"].get(name, {}).get("status", "ok") != "ok":
                continue  # hung or failed once: not again
            print(
                f"nccl-probe: round {round_}/{args.rounds}, profile {name} ({index + 1}/{len(profiles)}) "
                f"on {world} ranks ({args.backend})",
                flush=True,
            )
            try:
                entry = _run_profile(name, profile, scrub, args, world, port)
            except OSError as error:  # the rendezvous port is taken: by whom is not ours to trust
                raise SystemExit(
                    f"nccl-probe: 127.0.0.1:{port} cannot be bound for the rendezvous ({error.strerror}): another "
                    "process holds it and could pose as a rank; pass --port 0 (a free port) or another one"
                ) from None
            port += 1 if port else 0
            print(
                f"nccl-probe: profile {name}: {entry['status']} in {entry['seconds']}s"
                + (f": {entry['error']}" if entry.get("error") else ""),
                flush=True,
            )
            out["profiles"][name] = _merge(out["profiles"].get(name), entry)
    return out


def _gpu_count() -> int:
    """GPUs without importing torch here (a CUDA context in the driver would hold a GPU)."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--profiles", help="JSON file: {name: {NCCL_VAR: value}}")
    parser.add_argument("--out", help="where to write the result JSON")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--world-size", type=int, default=0, help="ranks (default: one per GPU; gloo: 2)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh process groups per profile, interleaved")
    parser.add_argument("--trials", type=int, default=7, help="graph replays timed per size and round")
    parser.add_argument("--iters", type=int, default=20, help="all-reduces per timed graph replay")
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--timeout", type=float, default=180, help="seconds per profile before it counts as hung")
    parser.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--rank-mode", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-json", help=argparse.SUPPRESS)
    parser.add_argument("--scrub-json", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_mode:
        return _rank_main(args)
    gpus = _gpu_count()
    if args.backend == "auto":
        args.backend = "nccl" if gpus else "gloo"
    world = args.world_size or (gpus if args.backend == "nccl" else 2)
    with open(args.profiles, encoding="utf-8") as handle:
        profiles = json.load(handle)
    result = _result(profiles, args, world)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0 if any(p["status"] == "ok" for p in result["profiles"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
