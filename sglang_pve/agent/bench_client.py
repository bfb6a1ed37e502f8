"""The benchmark's HTTP client: stdlib only, shipped to the target and run beside the server.

    python3 bench-client.py --plan plan.json --out result.json

It runs on the target, not on the controller, so that every timestamp is taken next to the
server: through SSH each streamed chunk would carry the tunnel's latency and jitter into TTFT and
ITL. The controller uploads it with the plan, runs it in one SSH command (its progress lines
stream back live), then reads the one result file.

The plan (JSON): {"server", "host", "port", "prompts": [text, ...], "output_len", "warmup",
"num_prompts", "concurrency": [1, 4, ...], "api_key_file": null | path, "progress_file": null | path}.
The progress file (rewritten atomically at each run's start, every PROGRESS_EVERY_S while it goes
on, and at its end) is what the
controller's live progress line reads while this command runs (tools/bench/progress.py):
{"phase": "warmup" | "measuring", "label", "done", "total", "output_tokens", "seconds"}. With an api-key the
client reads it here, on the target, from the root-only SGLang config the deploy wrote
(/etc/sglang/secrets/NAME.yaml) and sends `Authorization: Bearer <key>`: the key never travels
through argv, the plan, the SSH session's output or the controller. Requests are SGLang's native streaming /generate,
greedy, ignore_eos, max_new_tokens = output_len: the same requests as
`bench_serving --backend sglang`, and each chunk is timed the way it times them (see
record_chunk). Metrics are computed on the controller (sglang_pve.tools.bench.metrics) from the raw
timings in the result: {"warmup": [...], "runs": [{"concurrency", "duration_s", "requests": [
{"ttft", "latency", "itl": [...], "output_len", "prompt_tokens", "spec_accept_length",
"spec_verify_ct", "error"}]}], "server_info": {...} (GET /server_info after the first run)}.
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

TIMEOUT_S = 600
PROGRESS_EVERY_S = 1.0  # how often the progress file is rewritten while a run goes on
API_KEY = "api-key"  # the flag's key in SGLang's --config YAML (sglang_pve.deploy.render.server_yaml)


def read_api_key(path: str | None) -> str | None:
    """The `api-key: KEY` of SGLang's config file at `path` (None without a path or a key).
    Stdlib only: the secret alphabet (sglang_pve.config.secrets) has no blank, quote or backslash,
    so PyYAML's dump of it is one line, plain or in one pair of quotes."""
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, colon, value = line.partition(":")
            if colon and name == API_KEY:
                value = value.strip()
                return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value
    return None


def headers(api_key: str | None, **extra: str) -> dict[str, str]:
    """Request headers; the key (when the server has one) as SGLang checks it."""
    return {**extra, "User-Agent": "sglang-pve-bench", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}


class Request:
    """One streamed generation, timed like bench_serving's async_request_sglang_generate."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.ttft = 0.0
        self.latency = 0.0
        self.itl: list[float] = []
        self.last_stamp = 0.0
        self.output_len = 0
        self.meta: dict[str, Any] = {}  # SGLang's meta_info (JSON)
        self.error: str | None = None

    def record_chunk(self, data: dict[str, Any]) -> None:
        """A chunk with text: the first one sets TTFT; later ones spread their gap evenly over the
        tokens they carry (speculative decoding sends several per chunk), as bench_serving does."""
        self.meta = data.get("meta_info") or self.meta  # the last chunk carries the request's totals
        if not data.get("text"):
            return
        stamp = time.perf_counter()
        length = data.get("meta_info", {}).get("completion_tokens", self.output_len)
        if self.ttft == 0.0:
            self.ttft = stamp - self.start
        else:
            new = length - self.output_len
            if new <= 0:
                return
            self.itl.extend([(stamp - self.last_stamp) / new] * new)
        self.last_stamp = stamp
        self.output_len = length

    def to_json(self) -> dict[str, object]:
        return {
            "ttft": self.ttft,
            "latency": self.latency,
            "itl": self.itl,
            "output_len": self.output_len,
            "prompt_tokens": self.meta.get("prompt_tokens"),
            "spec_accept_length": self.meta.get("spec_accept_length"),
            "spec_verify_ct": self.meta.get("spec_verify_ct"),
            "error": self.error,
        }


def generate(host: str, port: int, text: str, output_len: int, api_key: str | None = None) -> Request:
    request = Request()
    body = json.dumps(
        {
            "text": text,
            "stream": True,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True},
        }
    )
    connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    try:
        connection.request(
            "POST", "/generate", body=body, headers=headers(api_key, **{"Content-Type": "application/json"})
        )
        response = connection.getresponse()
        if response.status != 200:
            request.error = f"HTTP {response.status}: {response.read(300).decode(errors='replace')}"
            return request
        while True:
            line = response.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            request.record_chunk(json.loads(payload))
        request.latency = time.perf_counter() - request.start
    except (OSError, ValueError, http.client.HTTPException) as error:
        request.error = f"{type(error).__name__}: {error}"
    finally:
        connection.close()
    if request.error is None and request.output_len == 0:
        request.error = "no tokens in the stream"
    return request


def get_json(host: str, port: int, path: str, api_key: str | None = None) -> object:
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        connection.request("GET", path, headers=headers(api_key))
        response = connection.getresponse()
        return json.loads(response.read()) if response.status == 200 else {"error": f"HTTP {response.status}"}
    except (OSError, ValueError, http.client.HTTPException) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    finally:
        connection.close()


class Run(TypedDict):
    concurrency: int
    duration_s: float
    requests: list[dict[str, object]]  # Request.to_json()


def write_progress(path: str | None, **fields: object) -> None:
    """The progress file (the module's docstring): temp file + rename, never half a document; best
    effort (a full disk costs the live line, not the measurement)."""
    if not path:
        return
    temp = f"{path}.tmp"
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(fields, handle)
        os.replace(temp, path)
    except OSError:
        pass


def run(
    plan: Mapping[str, Any],
    prompts: list[str],
    concurrency: int,
    label: str,
    api_key: str | None = None,
    phase: str = "measuring",
) -> Run:
    """`prompts` with at most `concurrency` in flight; progress on stdout every request and in the
    progress file (by a thread of its own, so that no file write falls inside a measured gap)."""
    done, lock = [0], threading.Lock()
    tok_total = [0]
    tic = time.perf_counter()

    def snapshot() -> dict[str, object]:
        return {
            "phase": phase,
            "label": label,
            "done": done[0],
            "total": len(prompts),
            "output_tokens": tok_total[0],
            "seconds": round(time.perf_counter() - tic, 3),
        }

    path = plan.get("progress_file")
    stopped = threading.Event()

    def report() -> None:
        while not stopped.wait(PROGRESS_EVERY_S):
            write_progress(path, **snapshot())

    write_progress(path, **snapshot())
    reporter = threading.Thread(target=report, daemon=True)
    if path:
        reporter.start()

    def one(text: str) -> Request:
        request = generate(plan["host"], plan["port"], text, plan["output_len"], api_key)
        with lock:
            done[0] += 1
            tok_total[0] += request.output_len
            rate = tok_total[0] / (time.perf_counter() - tic)
            failed = f", error: {request.error}" if request.error else ""
            print(
                f"bench {plan['server']}: {label} {done[0]}/{len(prompts)} requests done "
                f"({rate:.1f} output tok/s so far{failed})",
                flush=True,
            )
        return request

    try:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            requests = list(pool.map(one, prompts))
    finally:
        stopped.set()
        if path:
            reporter.join()
    write_progress(path, **snapshot())
    return {
        "concurrency": concurrency,
        "duration_s": time.perf_counter() - tic,
        "requests": [r.to_json() for r in requests],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="sglang-pve benchmark client (stdlib only)")
    parser.add_argument("--plan", required=True, help="the plan JSON written by the controller")
    parser.add_argument("--out", required=True, help="where to write the raw timings")
    args = parser.parse_args(argv)
    with open(args.plan, encoding="utf-8") as handle:
        plan = json.load(handle)
    prompts = plan["prompts"]
    api_key = read_api_key(plan.get("api_key_file"))
    warmup: list[dict[str, object]] = []
    runs: list[Run] = []
    server_info: object = None
    warm = [prompts[i % len(prompts)] for i in range(plan["warmup"])]
    if warm:
        warmup = run({**plan, "output_len": min(plan["output_len"], 32)}, warm, 1, "warm-up", api_key, "warmup")[
            "requests"
        ]
    for concurrency in plan["concurrency"]:
        count = plan["num_prompts"] if concurrency == 1 else max(plan["num_prompts"], 2 * concurrency)
        batch = [prompts[i % len(prompts)] for i in range(count)]
        label = "single-stream decode" if concurrency == 1 else f"concurrency {concurrency}"
        runs.append(run(plan, batch, concurrency, label, api_key))
        if server_info is None:  # accept length since start, as bench_serving reads it
            server_info = get_json(plan["host"], plan["port"], "/server_info", api_key)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump({"warmup": warmup, "runs": runs, "server_info": server_info}, handle)
    failed = sum(1 for run_ in runs for r in run_["requests"] if r["error"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
