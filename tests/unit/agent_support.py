"""Shared helpers of the agent tests (no tests here): specs with short intervals and hang-only
bounds, a scripted SGLang log, a tiny HTTP server, fake systemctl/nvidia-smi scripts, and
processes holding fake devices.

Every test runs with the `agent_env` fixture: the device glob points into tmp_path, nvidia-smi is
absent and systemctl is a fake, so nothing on this host is scanned, queried or signalled except
the test's own children (always by PID).
"""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sglang_pve.agent import spec as spec_module

PROJECT = Path(__file__).resolve().parents[2]

# A v0.5.9-era baseline start, 2 ranks shown (TP=8 prints the same per rank), tqdm bars with \r.
BASELINE_V059 = [
    "[2026-07-20 10:00:00] server_args=ServerArgs(model_path='/shared/models/Kimi-K2.5-INT4', tp_size=8, port=8000)",
    "[2026-07-20 10:00:05 TP0] Init torch distributed begin.",
    "[2026-07-20 10:00:05 TP1] Init torch distributed begin.",
    "[2026-07-20 10:00:09 TP0] Init torch distributed ends. mem usage=0.61 GB",
    "[2026-07-20 10:00:09 TP1] Init torch distributed ends. mem usage=0.61 GB",
    "[2026-07-20 10:00:10 TP0] Load weight begin. avail mem=93.46 GB",
    "[2026-07-20 10:00:10 TP1] Load weight begin. avail mem=93.46 GB",
    "\rMulti-thread loading shards:   0% Completed | 0/64 [00:00<?, ?it/s]"
    "\rMulti-thread loading shards:  50% Completed | 32/64 [02:10<02:10,  4.06s/it]"
    "\rMulti-thread loading shards: 100% Completed | 64/64 [04:20<00:00,  4.06s/it]",
    "[2026-07-20 10:04:31 TP1] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=20.11 GB, mem usage=73.35 GB.",
    "[2026-07-20 10:04:31 TP0] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=20.11 GB, mem usage=73.35 GB.",
    "[2026-07-20 10:04:32 TP0] KV Cache is allocated. #tokens: 912384, KV size: 7.65 GB",
    "[2026-07-20 10:04:32 TP1] KV Cache is allocated. #tokens: 912384, KV size: 7.65 GB",
    "[2026-07-20 10:04:32 TP1] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=20.11 GB, mem usage=73.35 GB.",
    "[2026-07-20 10:04:32 TP0] Memory pool end. avail mem=11.02 GB",
    "[2026-07-20 10:04:33 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=10.87 GB",
    "\rCapturing batches (bs=512 avail_mem=10.85 GB):   0%|          | 0/52 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=8 avail_mem=9.90 GB): 100%|##########| 52/52 [01:40<00:00,  1.93s/it]",
    "[2026-07-20 10:06:14 TP0] Capture cuda graph end. Time elapsed: 101.20 s. mem usage=0.98 GB. avail mem=9.89 GB.",
    "[2026-07-20 10:06:15 TP0] max_total_num_tokens=912384, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=262144, available_gpu_mem=9.89 GB",
    "[2026-07-20 10:06:16] INFO:     Started server process [4242]",
    "[2026-07-20 10:06:16] INFO:     Waiting for application startup.",
    "[2026-07-20 10:06:16] INFO:     Application startup complete.",
    "[2026-07-20 10:06:16] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    '[2026-07-20 10:06:17] INFO:     127.0.0.1:50112 - "GET /model_info HTTP/1.1" 200 OK',
    "[2026-07-20 10:06:17 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
    '[2026-07-20 10:06:19] INFO:     127.0.0.1:50114 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-07-20 10:06:19] The server is fired up and ready to roll!",
]

# A HEAD-era EAGLE-3 start: draft loads before the target graphs, then the draft's own graphs.
EAGLE3_HEAD = [
    "[2026-07-20 11:00:05 TP0] Init torch distributed begin.",
    "[2026-07-20 11:00:08 TP0] Init torch distributed ends. elapsed=3.21 s, mem usage=0.61 GB",
    "[2026-07-20 11:00:09 TP0] Load weight begin. avail mem=93.46 GB",
    "\rLoading safetensors checkpoint shards: 100% Completed | 64/64 [04:20<00:00,  4.06s/it]",
    "[2026-07-20 11:04:30 TP0] Load weight end. elapsed=261.02 s, type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=20.11 GB, mem usage=73.35 GB.",
    "[2026-07-20 11:04:31 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 456192, KV size: 3.82 GB",
    "[2026-07-20 11:04:31 TP0] Memory pool end. avail mem=15.80 GB",
    "[2026-07-20 11:04:32 TP0] Load weight begin. avail mem=15.80 GB",
    "[2026-07-20 11:04:34 TP0] Load weight end. elapsed=2.01 s, type=Eagle3DeepseekV2ForCausalLM, dtype=torch.bfloat16, avail mem=14.90 GB, mem usage=0.90 GB.",
    "[2026-07-20 11:04:35 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 456192, KV size: 0.12 GB",
    "[2026-07-20 11:04:36 TP0] Capture target decode CUDA graph begin. backend=flashinfer, bs=[1, 2, 4, 8]",
    "\rCapturing batches (bs=8 avail_mem=14.10 GB): 100%|##########| 4/4 [00:12<00:00,  3.07s/it]",
    "[2026-07-20 11:04:48 TP0] Capture target decode CUDA graph end. elapsed=12.30 s, mem usage=0.21 GB",
    "[2026-07-20 11:04:49 TP0] Capture draft decode CUDA graph begin. backend=flashinfer, bs=[1, 2, 4, 8]",
    "\rCapturing batches (bs=8 avail_mem=13.90 GB): 100%|##########| 4/4 [00:03<00:00,  1.01s/it]",
    "[2026-07-20 11:04:52 TP0] Capture draft decode CUDA graph end. elapsed=3.10 s",
    "[2026-07-20 11:04:52 TP0] Capture draft extend CUDA graph begin. backend=flashinfer, bs=[1, 2, 4, 8]",
    "[2026-07-20 11:04:54 TP0] Capture draft extend CUDA graph end. elapsed=2.00 s",
    "[2026-07-20 11:04:55 TP0] max_total_num_tokens=456192, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=131072, available_gpu_mem=13.50 GB",
    "[2026-07-20 11:04:56] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    '[2026-07-20 11:04:57] INFO:     127.0.0.1:50112 - "GET /model_info HTTP/1.1" 200 OK',
    "[2026-07-20 11:04:58 TP0] Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0,",
    '[2026-07-20 11:05:01] INFO:     127.0.0.1:50114 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-07-20 11:05:01] The server is fired up and ready to roll!",
]

# The draft context-length error after the 1T target loaded (notes/sglang.md section 2).
CONTEXT_LENGTH_CRASH = [
    "[2026-07-20 12:04:32 TP0] Load weight begin. avail mem=15.80 GB",
    "[2026-07-20 12:04:33 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang/venvs/0.5.9/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2630, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
    "ValueError: Warning: Target model's context_length (262144) is greater than the derived context_length (131072). "
    "This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from "
    "max_position_embeddings in the model's config. To allow overriding this maximum, set the env var "
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
    "",
    "[2026-07-20 12:04:34] Received sigquit from a child process. It usually means the child failed.",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_spec(tmp_path: Path, **changes) -> spec_module.Spec:
    """A valid spec; `changes` replace top-level keys or merge into dicts. Every bound a test does not
    test is far above the seconds a loaded CI worker can be paused (it ends only a real hang): a
    test of a bound (a stall, the deadline, the GPUs' wait) sets its own short value. Intervals and
    backoffs stay short, so the tests run fast."""
    server = changes.get("server", "t1")
    data = {
        "server": server,
        "unit": f"sglang-{server}.service",
        "unit_prefix": "sglang-",
        "log": str(tmp_path / "log" / f"{server}.log"),
        "host": "127.0.0.1",
        "port": free_port(),
        "speculative": False,
        "startup_timeout_s": 300,
        "stop_timeout_s": 5,
        "stall_timeout_s": {phase: 60 for phase in spec_module.STALL_PHASES},
        "watchdog": {
            "interval_s": 0.05,
            "timeout_s": 30,
            "failures": 3,
            "max_restarts": 2,
            "window_s": 3600,
            "backoff_s": 0.1,
            "backoff_max_s": 0.2,
            "restart_on_crash": True,
        },
        "gpu_free_timeout_s": 60,
        "gpu_idle_mib": 1024,
        "state_dir": str(tmp_path / "state"),
        "diagnoses_dir": str(tmp_path / "state" / "diagnoses"),
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    (tmp_path / "log").mkdir(exist_ok=True)
    path = tmp_path / "specs" / f"{data['server']}.lifecycle.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return spec_module.load(str(path))


class _RecordedTime:
    """The time module as one module of the agent sees it, with `sleep` recorded instead of slept."""

    def __init__(self, slept: list, then):
        self._slept, self._then = slept, then

    def sleep(self, seconds: float) -> None:
        self._slept.append(seconds)
        if self._then is not None:
            self._then(seconds)

    def __getattr__(self, name: str):
        return getattr(time, name)


class VirtualClock(_RecordedTime):
    """The time module of one agent module on a clock that moves only when that module sleeps: a
    stall or grace measured by it is exactly the seconds asked for, however busy the machine is.
    Only for code that waits on itself (a log already written, a fatal line already read), never on
    another process or thread, whose real time such a clock would not wait for."""

    def __init__(self):
        super().__init__([], None)
        self.start, self.epoch = time.monotonic(), time.time()

    @property
    def elapsed(self) -> float:
        return sum(self._slept)

    def monotonic(self) -> float:
        return self.start + self.elapsed

    def time(self) -> float:
        return self.epoch + self.elapsed


def virtual_clock(module, monkeypatch) -> VirtualClock:
    clock = VirtualClock()
    monkeypatch.setattr(module, "time", clock)
    return clock


def recorded_sleeps(module, monkeypatch, then=None) -> list:
    """The sleeps `module` asks for (its own `time.sleep` calls, not those of the libraries it
    calls, such as subprocess's waits), recorded instead of slept: a test asserts the wait asked
    for, which a loaded machine cannot change, instead of timing it. `then(seconds)` runs at each
    sleep: a fake changes its answer once the code was seen waiting, not at a fixed time."""
    slept: list = []
    monkeypatch.setattr(module, "time", _RecordedTime(slept, then))
    return slept


def append(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


class LogScript(threading.Thread):
    """Appends `lines` (each + "\\n") to the log, `delay` seconds apart, then stops (or at `halt()`)."""

    def __init__(self, path: str, lines: list, delay: float = 0.02):
        super().__init__(daemon=True)
        self.path, self.lines, self.delay = path, lines, delay
        self.halted = threading.Event()

    def run(self):
        for line in self.lines:
            if self.halted.is_set():
                return
            append(self.path, line + "\n")
            time.sleep(self.delay)

    def halt(self) -> None:
        self.halted.set()
        if self.is_alive():
            self.join()


class HealthServer:
    """A tiny HTTP server: `answers[path]` is a list of statuses served in turn (the last one
    repeats); unknown paths answer 404. `hits[path]` counts requests. `on_request(path, hits)` runs
    before each answer: what the server does while it is probed (a busy one logs a batch)."""

    def __init__(self, port: int, answers: dict, on_request=None):
        self.answers = {path: list(codes) for path, codes in answers.items()}
        self.hits = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                if on_request is not None:
                    on_request(self.path, server.hits[self.path])
                codes = server.answers.get(self.path, [404])
                code = codes.pop(0) if len(codes) > 1 else codes[0]
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def replace_text(path: Path, text: str) -> None:
    """Write `path` by rename, so a fake read by the code under test while a test thread changes it
    sees the old text or the new, never a half-written file (a truncated script or state file
    made these tests fail under CI load)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.chmod(path.stat().st_mode if path.exists() else 0o644)
    os.replace(partial, path)


def fake_systemctl(tmp_path: Path, units: dict, restart_rc: int = 0) -> Path:
    """A systemctl stand-in: `show` answers from `units` ({unit: {property: value}}), every call is
    appended as a JSON list to tmp_path/systemctl.calls. Called again (from a test thread too), it
    changes the answers atomically."""
    script = tmp_path / "systemctl"
    replace_text(tmp_path / "systemctl.units.json", json.dumps(units))
    replace_text(
        script,
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        args = sys.argv[1:]
        with open({str(tmp_path / "systemctl.calls")!r}, "a") as calls:
            calls.write(json.dumps(args) + "\\n")
        units = json.load(open({str(tmp_path / "systemctl.units.json")!r}))
        if args[0] == "show":
            props = args[args.index("-p") + 1].split(",")
            names = [a for a in args[1:] if not a.startswith("-") and a != args[args.index("-p") + 1]]
            default = {{"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "Result": "success", "MainPID": "0"}}
            blocks = []
            for name in names:
                unit = {{"Id": name, **units.get(name, default)}}
                if "--value" in args:
                    print("\\n".join(str(unit.get(p, "")) for p in props))
                else:
                    blocks.append("\\n".join(f"{{p}}={{unit.get(p, '')}}" for p in props))
            if blocks:
                print("\\n\\n".join(blocks))
        sys.exit({restart_rc} if args[0] == "restart" else 0)
        """),
    )
    script.chmod(0o755)
    return script


def fake_systemd_run(tmp_path: Path) -> Path:
    """A systemd-run stand-in: every call appended as a JSON list to tmp_path/systemd-run.calls."""
    script = tmp_path / "systemd-run"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(tmp_path / 'systemd-run.calls')!r}, 'a') as calls:\n"
        "    calls.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(0o755)
    return script


def systemd_run_calls(tmp_path: Path) -> list:
    path = tmp_path / "systemd-run.calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def systemctl_calls(tmp_path: Path) -> list:
    path = tmp_path / "systemctl.calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fake_nvidia_smi(tmp_path: Path, csv_text: str) -> Path:
    """nvidia-smi printing tmp_path/nvidia-smi.csv (change the answer with replace_text)."""
    replace_text(tmp_path / "nvidia-smi.csv", csv_text)
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'nvidia-smi.csv'}\n")
    script.chmod(0o755)
    return script


def hold_device(device: Path, unit: str | None = None, ignore_term: bool = False, argv_tag: str = "holder"):
    """A child process holding `device` open with O_PATH (like the lab's simulator), started with
    SGLANG_PVE_UNIT=unit when given. Returns the Popen once the descriptor is open."""
    device.touch()
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_PVE_UNIT"}
    if unit:
        env["SGLANG_PVE_UNIT"] = unit
    code = textwrap.dedent(f"""\
        import os, signal, sys, time
        {"signal.signal(signal.SIGTERM, signal.SIG_IGN)" if ignore_term else ""}
        fd = os.open({str(device)!r}, os.O_PATH)
        print("holding", flush=True)
        time.sleep(120)
        """)
    child = subprocess.Popen([sys.executable, "-c", code, argv_tag], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "holding"
    return child


def agent(*args, env_extra: dict | None = None, **kwargs) -> subprocess.Popen:
    """The agent's command line as the units run it, in a child process."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT), **(env_extra or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "sglang_pve.agent", *args],
        env=env,
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def sleeper():
    """A child process that stands in for the server's main PID."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def stop(child: subprocess.Popen) -> None:
    """Kill one of our own children by its PID and reap it."""
    if child.poll() is None:
        child.kill()
    child.wait(timeout=10)


def messages():
    """A `say` that records what the agent says."""
    said = []

    def say(text, error=False):
        said.append(text)

    say.said = said
    return say


def messages_then(fragment: str, action):
    """messages(), and `action()` once, when a message containing `fragment` is said: a test changes
    what a fake answers once the code under test was seen waiting for it, not at a fixed time (under
    load that time can come before the code even looked, and the wait it tests never happens)."""
    record = messages()

    def say(text, error=False):
        record(text, error)
        if fragment in text and not say.acted:
            say.acted = True
            action()

    say.said, say.acted = record.said, False
    return say


class FakeHost:
    """systemctl and nvidia-smi of a pretend host (fake_host.py: units, GPU memory, a call log),
    installed through SGLANG_PVE_SYSTEMCTL / SGLANG_PVE_NVIDIA_SMI for one test."""

    def __init__(self, tmp_path: Path, monkeypatch, units: dict | None = None, linger: int = 0):
        self.path = tmp_path / "host.json"
        self.write(
            {
                "units": units or {},
                "fail_start": {},
                "fail_stop": [],
                "linger": linger,
                "busy_after_stop": 0,
                "smi_error": None,
                "calls": [],
            }
        )
        source = Path(__file__).with_name("fake_host.py")
        for tool, variable in (("systemctl", "SGLANG_PVE_SYSTEMCTL"), ("nvidia-smi", "SGLANG_PVE_NVIDIA_SMI")):
            script = tmp_path / f"fake-{tool}"
            script.write_text(f'#!/bin/sh\nexec {sys.executable} {source} {self.path} {tool} "$@"\n')
            script.chmod(0o755)
            monkeypatch.setenv(variable, str(script))

    def read(self) -> dict:
        return json.loads(self.path.read_text())

    def write(self, host: dict) -> None:
        self.path.write_text(json.dumps(host))

    def change(self, **values) -> None:
        self.write(self.read() | values)

    def state(self, unit: str, prop: str = "ActiveState") -> str | None:
        return self.read()["units"].get(unit, {}).get(prop)

    def calls(self, tool: str = "systemctl") -> list:
        return [call[1:] for call in self.read()["calls"] if call[0] == tool]

    def log(self) -> list:
        """Every call in order: ["systemctl", verb, ...] and ["nvidia-smi", "busy"|"free"]."""
        return self.read()["calls"]


def rendered(*paths) -> dict[str, str]:
    """The `files` of an apply spec: each path with the sha256 of its content now, as the deploy
    renders it (release_store.Store.record checks the disk against it)."""
    import hashlib
    from pathlib import Path

    return {str(path): hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in paths}
