"""The SGLang simulator (lab/sglang_sim) on the host, without the lab.

The simulator runs as a subprocess (`python -m sglang.launch_server --config ...` with the
source tree on PYTHONPATH), with tiny phase durations, a temp fault file, temp config.json
model dirs, a free port, and temp dirs for the published GPU records (SGLANG_SIM_RUN_DIR) and
the device nodes (SGLANG_SIM_DEV_DIR, regular files here). Every simulator runs in its own
session; teardown SIGKILLs that process group and any leaked child by PID, never by name.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

SIM_ROOT = Path(__file__).resolve().parents[2] / "lab" / "sglang_sim"
NVIDIA_SMI = SIM_ROOT / "nvidia_smi.py"
TINY_PHASES = "dist_init=0.02,weights=0.05,kv_cache=0.02,draft=0.02,cuda_graph=0.05,http=0.02,warmup=0.05"
DEVICE_NODES = ["nvidiactl", "nvidia-uvm"] + [f"nvidia{i}" for i in range(8)]
CONTEXT_ERROR = (
    "ValueError: Warning: Target model's context_length (131072) is greater than the derived "
    "context_length (65536). This may lead to incorrect model outputs or CUDA errors. Note that "
    "the derived context_length may differ from max_position_embeddings in the model's config. "
    "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
)
TARGET_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": 61,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "max_position_embeddings": 262144,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    },
    "vision_config": {"hidden_size": 1152},
    "quantization_config": {"quant_method": "compressed-tensors"},
}
DRAFT_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
}
# 100 GB in 4 shards: 47 GiB of weights per rank at tp 2.
TARGET_INDEX = {
    "metadata": {"total_size": 100 * 10**9},
    "weight_map": {f"w{i}": f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)},
}
BASELINE = {
    "served-model-name": "kimi-k2.5",
    "tp-size": 2,
    "trust-remote-code": True,
    "host": "127.0.0.1",
    "mem-fraction-static": 0.88,
    "disable-custom-all-reduce": True,
    "enable-metrics": True,
    "decode-log-interval": 10,
    "reasoning-parser": "kimi_k2",
    "tool-call-parser": "kimi_k2",
}
EAGLE3 = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 2,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 3,
    "context-length": 131072,
}


# ---- helpers ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat(pid) -> list:
    """Fields of /proc/PID/stat after the command name ([] when the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):  # gone between open and read: ESRCH
        return []


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z"


def _start_time(pid: int):
    return _stat(pid)[19] if _alive(pid) else None


def _group_members(pgid: int) -> list:
    """Live PIDs of process group `pgid`."""
    members = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = _stat(entry)
        if fields and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


HANG_S = 120.0  # how long a simulator step may take before it counts as hung: a loaded CI worker pauses for seconds


def _wait(predicate, timeout: float = HANG_S, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Sim:
    """One simulator process tree and its log, port and GPU records."""

    def __init__(self, popen: subprocess.Popen, log: Path, port: int, run_dir: Path):
        self.popen, self.log_path, self.port, self.run_dir = popen, log, port, run_dir

    def log(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")  # keep tqdm's \r

    def wait_log(self, pattern: str, timeout: float = HANG_S) -> str:
        return _wait(lambda: re.search(pattern, self.log()), timeout, repr(pattern)).group(0)

    def port_open(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def http(self, path: str, body=None, timeout: float = 30.0):
        """(status, body bytes) of GET (or POST with a JSON body)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def records(self) -> list:
        """The GPU records currently published (one per GPU-holding process)."""
        return [json.loads(p.read_text()) for p in (self.run_dir / "gpus").glob("*.json")]

    def kill(self) -> None:
        """SIGKILL what is left: leaked children (checked by start time) and the process group
        (whose id cannot be reused while any member lives)."""
        for record in self.records():
            if record["role"] == "leak" and _start_time(record["pid"]) == record["starttime"]:
                os.kill(record["pid"], signal.SIGKILL)
        if _group_members(self.popen.pid):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "target").mkdir()
    (root / "target" / "config.json").write_text(json.dumps(TARGET_CONFIG))
    (root / "target" / "model.safetensors.index.json").write_text(json.dumps(TARGET_INDEX))
    (root / "draft").mkdir()
    (root / "draft" / "config.json").write_text(json.dumps(DRAFT_CONFIG))
    return SimpleNamespace(target=root / "target", draft=root / "draft")


@pytest.fixture
def lab(tmp_path, models):
    """Writes configs and faults, starts simulators, kills them all at teardown."""
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)  # agent_env (tests/unit/conftest.py) may have made it: the agent then sees these nodes
    for node in DEVICE_NODES:
        (dev / node).touch()
    sims = []

    def config(name: str, spec: bool = False, **overrides) -> Path:
        data = {"model-path": str(models.target), **BASELINE, "port": _free_port()}
        if spec:
            data.update(EAGLE3, **{"speculative-draft-model-path": str(models.draft)})
        data.update({key.replace("_", "-"): value for key, value in overrides.items()})
        data = {key: value for key, value in data.items() if value is not None}  # None: unset
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def faults(entries: dict) -> None:
        (tmp_path / "faults.yaml").write_text(yaml.safe_dump(entries))

    def start(config_path: Path, phases: str = TINY_PHASES, **extra_env) -> Sim:
        env = {
            **os.environ,
            "PYTHONPATH": str(SIM_ROOT),
            "PYTHONUNBUFFERED": "1",
            "SGLANG_SIM_FAULTS": str(tmp_path / "faults.yaml"),
            "SGLANG_SIM_RUN_DIR": str(tmp_path / "run"),
            "SGLANG_SIM_DEV_DIR": str(dev),
            "SGLANG_SIM_PHASE_SECONDS": phases,
            "SGLANG_SIM_SIGTERM_POLL": "0.1",
            **extra_env,
        }
        log = config_path.with_suffix(".log")
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "sglang.launch_server", "--config", str(config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        port = yaml.safe_load(config_path.read_text())["port"]
        sim = Sim(popen, log, port, tmp_path / "run")
        sims.append(sim)
        return sim

    yield SimpleNamespace(config=config, faults=faults, start=start, dev=dev, run=tmp_path / "run")
    for sim in sims:
        sim.kill()


@pytest.fixture(scope="module")
def sglang():
    """The simulator's package imported in-process (removed again afterwards)."""
    sys.path.insert(0, str(SIM_ROOT))
    try:
        from sglang.sim import faults, perf
        from sglang.srt import model_config, server_args

        yield SimpleNamespace(server_args=server_args, model_config=model_config, perf=perf, faults=faults)
    finally:
        sys.path.remove(str(SIM_ROOT))
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]


def _assert_in_order(text: str, patterns: list) -> None:
    position = 0
    for pattern in patterns:
        match = re.compile(pattern, re.M).search(text, position)
        assert match, f"{pattern!r} not found after offset {position}:\n{text[position:][:3000]}"
        position = match.end()


def _nvidia_smi(run_dir: Path, *args: str, gpus: range | list = range(8)) -> subprocess.CompletedProcess:
    """The fake nvidia-smi on a system that has the device nodes of ``gpus``."""
    dev = run_dir / f"dev-{'-'.join(map(str, gpus))}"
    dev.mkdir(exist_ok=True)
    for i in gpus:
        (dev / f"nvidia{i}").touch()
    env = {**os.environ, "SGLANG_SIM_RUN_DIR": str(run_dir), "SGLANG_SIM_DEV_DIR": str(dev)}
    return subprocess.run(
        [sys.executable, str(NVIDIA_SMI), *args], capture_output=True, text=True, env=env, timeout=HANG_S
    )


# ---- arguments (in-process, as a preflight would call them) ------------------------------------


def test_config_merges_under_the_command_line(sglang, lab):
    path = lab.config("eagle3-2step", spec=True)
    args = sglang.server_args.prepare_server_args(
        ["--config", str(path), "--port", "1234", "--speculative-num-step", "5"]
    )
    assert (args.port, args.speculative_num_steps) == (1234, 5)  # CLI wins; argparse prefixes work
    assert args.tp_size == 2 and args.trust_remote_code is True  # YAML over defaults, store_true
    assert args.watchdog_timeout == 300 and args.host == "127.0.0.1"


def test_config_rejects_unknown_and_deprecated_keys(sglang, lab):
    with pytest.raises(SystemExit) as exc:
        sglang.server_args.prepare_server_args(["--config", str(lab.config("bad", no_such_flag=1))])
    assert exc.value.code == 2
    with pytest.raises(ValueError, match="Unsupported config option 'cuda_graph_max_bs'"):
        sglang.server_args.prepare_server_args(["--config", str(lab.config("old", cuda_graph_max_bs=16))])


def test_resolve_applies_speculative_rules(sglang, lab, caplog):
    def resolved(**overrides):
        args = sglang.server_args.prepare_server_args(["--config", str(lab.config("s", spec=True, **overrides))])
        args.resolve_once()
        return args

    args = resolved(speculative_num_draft_tokens=7)
    assert (args.speculative_num_steps, args.speculative_num_draft_tokens) == (2, 3)
    assert (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        in caplog.text
    )
    assert args.max_running_requests == 48
    args = resolved(speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    with pytest.raises(AssertionError):
        resolved(speculative_num_steps=None, speculative_num_draft_tokens=None)
    with pytest.raises(TypeError):
        resolved(speculative_eagle_topk=None)
    with pytest.raises(OSError, match="Can't load the configuration of '/nonexistent'"):
        resolved(model_path="/nonexistent")


def test_context_length_rules(sglang, tmp_path, monkeypatch):
    get = sglang.model_config.get_context_length
    assert get({"max_position_embeddings": 4096, "rope_scaling": {"factor": 4.0}}) == 16384
    assert get({"max_position_embeddings": 4096, "rope_scaling": {"factor": 4.0, "rope_type": "llama3"}}) == 4096
    assert get({"seq_length": 8192, "max_position_embeddings": 4096}) == 8192
    assert get({}) == 2048
    (tmp_path / "config.json").write_text(json.dumps(DRAFT_CONFIG))
    ModelConfig = sglang.model_config.ModelConfig
    with pytest.raises(ValueError) as exc:
        ModelConfig(str(tmp_path), context_length=262144, is_draft_model=True)
    assert str(exc.value) == CONTEXT_ERROR.replace("131072", "262144").replace("65536", "131072")[len("ValueError: ") :]
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    assert ModelConfig(str(tmp_path), context_length=262144, is_draft_model=True).context_len == 262144


def test_nccl_profile_sets_the_baseline_rate(sglang):
    tuned = dict.fromkeys(sglang.perf.NCCL_TUNING_VARS, "1")
    assert sglang.perf.baseline_tok_s({}) == 63.0
    assert sglang.perf.baseline_tok_s(tuned) == 89.0


# ---- the server process ---------------------------------------------------------------------


def test_baseline_starts_phase_by_phase_and_stops_on_sigterm(lab):
    # an 8 s warm-up: the /health probe below comes within it on a loaded machine too (1.2 s did not:
    # the probe came after it, 200, in a run with the workers' processes paused at random)
    phases = TINY_PHASES.replace("weights=0.05", "weights=0.6").replace("warmup=0.05", "warmup=8")
    sim = lab.start(lab.config("baseline"), phases=phases)
    sim.wait_log(r"TP0\] Load weight begin")
    assert not sim.port_open()
    sim.wait_log(r"Uvicorn running on")
    assert sim.http("/health")[0] == 503  # warming up
    status, body = sim.http("/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["max_model_len"] == 262144
    sim.wait_log(r"The server is fired up and ready to roll!")
    assert sim.http("/health")[0] == 200
    _assert_in_order(
        sim.log(),
        [
            r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server_args=ServerArgs\(model_path=",
            r"^\[[\d :-]+ TP0\] Init torch distributed begin\.$",
            r"^\[[\d :-]+ TP0\] Init torch distributed ends\. elapsed=[\d.]+ s, mem usage=[\d.]+ GB$",
            r"^\[[\d :-]+ TP0\] Load weight begin\. avail mem=[\d.]+ GB$",
            r"\rMulti-thread loading shards: 100% Completed \| 4/4 \[",
            r"TP0\] Load weight end\. elapsed=[\d.]+ s, type=KimiK25ForConditionalGeneration, .*mem usage=46\.57 GB\.$",
            r"TP0\] KV Cache is allocated\. #tokens: \d+, KV size: [\d.]+ GB$",
            r"TP0\] Memory pool end\. avail mem=[\d.]+ GB$",
            r"TP0\] Capture cuda graph begin\. This can take up to several minutes\. avail mem=[\d.]+ GB$",
            r"\rCapturing batches \(bs=1 avail_mem=[\d.]+ GB\): 100%\|",
            r"TP0\] Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=[\d.]+ GB\. avail mem=[\d.]+ GB\.$",
            r"TP0\] max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            r"max_running_requests=\d+, context_len=262144, available_gpu_mem=[\d.]+ GB$",
            r"^\[[\d :-]+\] INFO:     Started server process \[\d+\]$",
            r"INFO:     Waiting for application startup\.$",
            r"INFO:     Application startup complete\.$",
            rf"INFO:     Uvicorn running on http://127\.0\.0\.1:{sim.port} \(Press CTRL\+C to quit\)$",
            r'INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK$',
            r"TP0\] Prefill batch\. #new-seq: 1, #new-token: \d+",
            r'"POST /v1/chat/completions HTTP/1\.1" 200 OK$',  # Kimi-K2.5 is multimodal
            r"^\[[\d :-]+\] The server is fired up and ready to roll!$",
        ],
    )
    assert sim.log().count("Init torch distributed ends") == 2  # every rank
    assert sim.log().count("Multi-thread loading shards:   0%") == 1  # TP0 only

    status, body = sim.http(
        "/generate", {"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 12}}
    )
    meta = json.loads(body)["meta_info"]
    assert status == 200 and meta["completion_tokens"] == 12 and "spec_accept_length" not in meta
    smi = _nvidia_smi(lab.run, "--query-gpu=index,memory.used,utilization.gpu", "--format=csv,noheader,nounits")
    used = [int(line.split(", ")[1]) for line in smi.stdout.splitlines()]
    assert used[0] > 80000 and used[1] > 80000 and used[2:] == [3] * 6

    members = _group_members(sim.popen.pid)
    assert len(members) >= 4  # launcher, 2 schedulers, detokenizer (+ resource tracker)
    sim.popen.send_signal(signal.SIGTERM)
    sim.popen.wait(timeout=HANG_S)
    _wait(lambda: not any(map(_alive, members)), HANG_S, "the process tree to exit")
    assert "Draining requests and shutting down..." in sim.log()


def _samples(text: str) -> dict:
    """`name{labels}` -> value of every sample in a Prometheus text exposition."""
    rows = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: float(value) for key, value in rows}


def test_speculative_server_reports_acceptance(lab):
    sim = lab.start(lab.config("eagle3-2step", spec=True, random_seed=7))
    sim.wait_log(r"The server is fired up and ready to roll!")
    _assert_in_order(
        sim.log(),
        [
            r"TP0\] Load weight end\. .*type=KimiK25ForConditionalGeneration",
            r"TP0\] Memory pool end\.",
            r"TP0\] Load weight begin\.",
            r"TP0\] Load weight end\. .*type=LlamaForCausalLMEagle3",
            r"TP0\] Capture cuda graph end\.",
            r"TP0\] Capture draft cuda graph end\.",
            r"context_len=131072",
        ],
    )
    request = {"text": "hello", "sampling_params": {"max_new_tokens": 40, "temperature": 0}}
    before = _samples(sim.http("/metrics")[1].decode())  # after the server's own warm-up request
    first, second = (json.loads(sim.http("/generate", request)[1]) for _ in range(2))
    assert first["text"] == second["text"]  # deterministic for a seed
    assert first["meta_info"]["spec_accept_length"] > 1.0
    info = json.loads(sim.http("/server_info")[1])
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0
    assert info["speculative_num_draft_tokens"] == 3 and info["version"].startswith("0.5.16.dev")
    metrics = sim.http("/metrics")[1].decode()
    assert "sglang:spec_accept_length{" in metrics
    model = 'model_name="kimi-k2.5"'
    values = _samples(metrics)
    grew = {key: value - before.get(key, 0.0) for key, value in values.items()}
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):  # collector.py's histograms
        assert grew[f"sglang:{name}_count{{{model}}}"] == 2
        assert grew[f'sglang:{name}_bucket{{{model},le="+Inf"}}'] == 2
        assert values[f"sglang:{name}_sum{{{model}}}"] > before[f"sglang:{name}_sum{{{model}}}"]
    assert grew[f"sglang:generation_tokens_total{{{model}}}"] == 2 * 40
    assert grew[f"sglang:inter_token_latency_seconds_count{{{model}}}"] == 0  # one chunk each: no interval
    sim.http("/generate", {**request, "stream": True})  # chunk after chunk: an interval per token after the first
    itl = f"sglang:inter_token_latency_seconds_count{{{model}}}"
    assert 0 < _samples(sim.http("/metrics")[1].decode())[itl] - values[itl] < 40
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus (Makefile SYSTEM_PACKAGES)
        # SGLang's own names break one lint rule (the colon is meant for recording rules); nothing else may
        checked = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True)
        problems = (checked.stdout + checked.stderr).splitlines()
        assert problems and all(p.endswith("metric names should not contain ':'") for p in problems), problems


def test_a_fault_keyed_by_version_acts_only_in_that_build(sglang, lab, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_SIM_FAULTS", str(tmp_path / "faults.yaml"))
    this, other = sglang.faults.__version__, "0.5.16.dev20260723+gc0ffee123"
    assert this != other
    lab.faults({"baseline": {"hang": "weights", "phase_seconds": {"weights": 2}, "version": other}})
    other_build = sglang.faults.load_faults("baseline")
    assert other_build.hang is None and other_build.phase_seconds == {"weights": 2}  # durations apply everywhere
    lab.faults({"baseline": {"crash": "context_length", "version": this}})
    assert sglang.faults.load_faults("baseline").crash == "context_length"
    lab.faults({"baseline": {"crash": "context_length", "version": 5}})
    with pytest.raises(ValueError, match=r"faults.yaml: baseline: version must be a string"):
        sglang.faults.load_faults("baseline")


def test_crash_fault_fails_like_the_draft_context_check(lab):
    lab.faults({"eagle3-2step": {"crash": "context_length"}})
    sim = lab.start(lab.config("eagle3-2step", spec=True))
    assert sim.popen.wait(timeout=HANG_S) != 0
    log = sim.log()
    assert CONTEXT_ERROR in log
    _assert_in_order(
        log,
        [
            r"TP\d\] Memory pool end\.",
            r"TP\d\] Scheduler hit an exception: Traceback \(most recent call last\):",
            re.escape(CONTEXT_ERROR),
            r"^\[[\d :-]+\] Received sigquit from a child process\. It usually means the child failed\.$",
        ],
    )
    assert "Capture cuda graph" not in log and not sim.port_open()
    _wait(lambda: not _group_members(sim.popen.pid), HANG_S, "the process tree to exit")


def test_hang_with_leak_keeps_the_gpu_after_the_launcher_dies(lab):
    lab.faults({"baseline": {"hang": "cuda_graph", "leak_child": True}})
    sim = lab.start(lab.config("baseline"))
    sim.wait_log(r"TP0\] Capture cuda graph begin")
    sim.wait_log(r"TP1\] Capture cuda graph begin")
    size = sim.log_path.stat().st_size
    time.sleep(1.0)
    assert sim.log_path.stat().st_size == size  # silent
    assert not sim.port_open()
    schedulers = [r for r in sim.records() if r["role"].startswith("scheduler_TP")]
    assert len(schedulers) == 2 and all(r["utilization_gpu"] == 0 and r["memory_used_mib"] > 80000 for r in schedulers)
    leak = _wait(lambda: [r for r in sim.records() if r["role"] == "leak"], HANG_S, "the leaked child")[0]

    os.kill(sim.popen.pid, signal.SIGKILL)  # the launcher dies; PDEATHSIG takes the schedulers
    sim.popen.wait(timeout=HANG_S)
    _wait(lambda: not any(_alive(r["pid"]) for r in schedulers), HANG_S, "the schedulers to die")
    os.kill(leak["pid"], signal.SIGTERM)  # ignored
    time.sleep(0.2)
    assert _alive(leak["pid"])
    fds = {os.readlink(f"/proc/{leak['pid']}/fd/{fd}") for fd in os.listdir(f"/proc/{leak['pid']}/fd")}
    assert {str(lab.dev / name) for name in ("nvidia0", "nvidiactl", "nvidia-uvm")} <= fds
    smi = _nvidia_smi(lab.run, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0")
    assert int(smi.stdout) > 1000


def test_warmup_hang_keeps_the_port_open_and_unhealthy(lab):
    lab.faults({"baseline": {"hang": "warmup"}})
    sim = lab.start(lab.config("baseline"))
    sim.wait_log(r'"GET /model_info HTTP/1\.1" 200')
    sim.wait_log(r"Prefill batch")  # the warm-up request scheduled (under load, later than a fixed sleep)
    time.sleep(0.8)  # ... and stuck there
    assert sim.http("/health")[0] == 503
    assert sim.log().count("Prefill batch") == 1 and "fired up" not in sim.log()  # logged when scheduled, then stuck


def test_wedge_after_ready_fails_health_but_stays_alive(lab):
    # Healthy for 5 s after "fired up", the detokenizer given 3 s per check: room for the test's steps
    # between the line and its first probe, and for a paused simulator process, on a loaded machine
    # (1.5 s and 1 s were not: the probe came after the wedge, or the healthy answer after its bound).
    lab.faults({"baseline": {"wedge_after_ready": 5}})
    sim = lab.start(lab.config("baseline"), SGLANG_HEALTH_CHECK_TIMEOUT="3")
    ready = sim.wait_log(r"The server is fired up and ready to roll!")
    members = _group_members(sim.popen.pid)
    assert sim.http("/health")[0] == 200  # healthy first, as a readiness gate sees it
    time.sleep(5)  # the wedge's time has come (the simulator's timer can still be late: polled below)
    _wait(lambda: sim.http("/health")[0] == 503, HANG_S, "the wedge")
    after_ready = sim.log().split(ready, 1)[1]
    assert "Health check failed. Server couldn't get a response from detokenizer for last 3 seconds." in after_ready
    assert "Prefill batch" not in after_ready.split("Health check failed", 1)[1]  # nothing taken after the wedge
    assert sim.popen.poll() is None and all(map(_alive, members))
    sim.popen.send_signal(signal.SIGTERM)  # unhealthy: SGLang exits without draining
    assert sim.popen.wait(timeout=HANG_S) == -signal.SIGKILL
    assert "Signal SIGTERM received while health check failed. Force exiting." in sim.log()
    _wait(lambda: not any(map(_alive, members)), HANG_S, "the process tree to exit")


# ---- fake nvidia-smi --------------------------------------------------------------------------


def _group_of_two(lab, tmp_path, **overrides):
    """A TP group of two simulated nodes on this host: (rank 0's config, rank 1's), the same
    configuration `tp` with SGLang's multi-node flags, each node its own GPU record dir."""
    addr = f"127.0.0.1:{_free_port()}"
    rank0 = lab.config("tp", nnodes=2, node_rank=0, dist_init_addr=addr, **overrides)
    (tmp_path / "node1").mkdir()
    rank1 = tmp_path / "node1" / "tp.yaml"
    rank1.write_text(yaml.safe_dump({**yaml.safe_load(rank0.read_text()), "node-rank": 1, "port": _free_port()}))
    return rank0, rank1


def test_multi_node_rank0_waits_for_the_others_and_rank1_serves_only_health(lab, tmp_path):
    rank0_config, rank1_config = _group_of_two(lab, tmp_path)
    rank0 = lab.start(rank0_config)
    rank0.wait_log(r"TP0\] Init torch distributed begin")
    time.sleep(1.0)  # far longer than the tiny dist_init phase: TP0 waits on the dist-init port
    assert "Init torch distributed ends" not in rank0.log() and not rank0.port_open()
    rank1 = lab.start(rank1_config, SGLANG_SIM_RUN_DIR=str(tmp_path / "node1" / "run"))
    rank0.wait_log(r"The server is fired up and ready to roll!")
    line = rank1.wait_log(r"Dummy health check server started in background thread at \S+")
    assert line.endswith(f"127.0.0.1:{rank1.port}")
    log1 = rank1.log()
    assert re.search(r"TP1\] Init torch distributed ends", log1) and re.search(r"TP1\] Capture cuda graph end", log1)
    assert "TP0]" not in log1 and "Uvicorn running" not in log1 and "fired up" not in log1
    assert "TP1]" not in rank0.log()
    for path in ("/ping", "/health", "/health_generate"):
        assert rank1.http(path) == (200, b"")
    assert rank1.http("/generate", {"text": "x"})[0] in (404, 405) and rank1.http("/v1/models")[0] == 404
    assert "GET /health" not in rank1.log()  # uvicorn at warning: no access lines
    # each node holds its own GPU 0 (tp_rank % ranks per node)
    assert [r["gpu"] for r in rank0.records() if r["role"].startswith("scheduler")] == [0]
    assert [r["gpu"] for r in rank1.records() if r["role"].startswith("scheduler")] == [0]
    status, body = rank0.http("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4}})
    assert status == 200


def test_a_hang_on_rank1_leaves_rank0_silent_in_the_collective(lab, tmp_path):
    rank0_config, rank1_config = _group_of_two(lab, tmp_path)
    lab.faults({"tp": {"hang": "weights", "node_rank": 1}})
    rank0 = lab.start(rank0_config)
    rank1 = lab.start(rank1_config, SGLANG_SIM_RUN_DIR=str(tmp_path / "node1" / "run"))
    rank1.wait_log(r"TP1\] Load weight begin")
    rank0.wait_log(r"TP0\] Load weight end")  # its own weights load; then the KV pool sizing waits for TP1
    time.sleep(1.0)
    assert "KV Cache is allocated" not in rank0.log() and not rank0.port_open()
    os.killpg(rank1.popen.pid, signal.SIGKILL)  # the dead peer does not free rank 0: still blocked
    time.sleep(0.5)
    assert "KV Cache is allocated" not in rank0.log() and rank0.popen.poll() is None


def test_nvidia_smi_formats(tmp_path):
    gpus = tmp_path / "gpus"
    gpus.mkdir()
    starttime = _start_time(os.getpid())
    (gpus / "1.json").write_text(
        json.dumps(
            {"pid": os.getpid(), "starttime": starttime, "gpu": 3, "memory_used_mib": 90000, "utilization_gpu": 35}
        )
    )
    # Same PID, other start time: the process that wrote it is gone (PID reused).
    (gpus / "2.json").write_text(
        json.dumps({"pid": os.getpid(), "starttime": "1", "gpu": 4, "memory_used_mib": 50000, "utilization_gpu": 90})
    )

    out = _nvidia_smi(
        tmp_path, "--query-gpu=index,name,memory.used,memory.total,utilization.gpu,driver_version", "--format=csv"
    ).stdout.splitlines()
    assert out[0] == "index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], driver_version"
    assert out[4] == "3, NVIDIA RTX PRO 6000 Blackwell Server Edition, 90003 MiB, 97887 MiB, 35 %, 580.95.05"
    assert out[5].startswith("4, NVIDIA RTX PRO 6000 Blackwell Server Edition, 3 MiB,")
    assert not (gpus / "2.json").exists()  # record of a gone process: dropped
    plain = _nvidia_smi(tmp_path, "--query-gpu=uuid,memory.used", "--format=csv,noheader,nounits").stdout.splitlines()
    assert len(plain) == 8 and re.fullmatch(r"GPU-[0-9a-f-]{36}, 90003", plain[3])
    assert (
        _nvidia_smi(tmp_path, "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits").stdout
        == ""
    )
    listing = _nvidia_smi(tmp_path, "-L").stdout.splitlines()
    assert len(listing) == 8 and listing[0].startswith(
        "GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-"
    )
    assert "CUDA Version: 13.0" in _nvidia_smi(tmp_path).stdout
    bad = _nvidia_smi(tmp_path, "--query-gpu=index,bogus", "--format=csv")
    assert bad.returncode == 2 and bad.stdout.strip() == 'Field "bogus" is not a valid field to query.'


def test_nvidia_smi_sees_only_the_gpus_passed_through(tmp_path):
    listing = _nvidia_smi(tmp_path, "-L", gpus=[2, 5]).stdout.splitlines()
    assert [line.split(":")[0] for line in listing] == ["GPU 2", "GPU 5"]
    assert _nvidia_smi(tmp_path, "--query-gpu=count", "--format=csv,noheader", gpus=[2, 5]).stdout.split() == ["2", "2"]
    missing = _nvidia_smi(tmp_path, "-L", "-i", "0", gpus=[2, 5])
    assert (missing.returncode, missing.stdout.strip()) == (6, "No devices were found")
    none = _nvidia_smi(tmp_path, "-L", gpus=[])
    assert (none.returncode, none.stdout.strip()) == (6, "No devices were found")


@pytest.mark.parametrize(
    "method, path, headers, code",
    [
        ("GET", "/v1/models", {}, 401),
        ("GET", "/v1/models", {"Authorization": "Bearer wrong"}, 401),
        ("GET", "/v1/models", {"Authorization": "bearer k-123"}, 200),  # the scheme is case-insensitive
        ("GET", "/v1/models", {"x-api-key": "k-123"}, 200),
        ("GET", "/no-such-path", {}, 401),  # the middleware decides before routing ...
        ("GET", "/no-such-path", {"Authorization": "Bearer k-123"}, 404),  # ... then FastAPI's 404
        ("GET", "/generate", {}, 401),  # ... and before the method check (405 with the key)
        ("GET", "/health", {}, 200),
        ("GET", "/metrics", {}, 200),
        ("POST", "/flush_cache", {"Authorization": "Bearer k-123"}, 401),  # admin-optional: the admin key
        ("POST", "/flush_cache", {"Authorization": "Bearer admin-456"}, 200),
    ],
)
def test_the_api_key_is_decided_as_sglangs_middleware_does(sglang, method, path, headers, code):
    """sgl-project/sglang python/sglang/srt/utils/auth.py (commit 0ce3659c) decide_request_auth and
    add_api_key_middleware: 401 {"error": "Unauthorized"}, before any route is matched."""
    import http.client
    import threading

    from sglang.sim.http_server import SimHTTPServer

    args = SimpleNamespace(api_key="k-123", admin_api_key="admin-456")
    tm = SimpleNamespace(args=args, health=lambda: (200, b""), flush_cache=lambda: (200, "ok"))
    server = SimHTTPServer(("127.0.0.1", 0), tm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=HANG_S)
        connection.request(method, path, headers=headers)
        reply = connection.getresponse()
        body = reply.read()
    finally:
        server.shutdown()
        server.server_close()
    assert reply.status == code or (code == 200 and reply.status not in (401, 403, 404, 405)), body
    if code == 401:
        assert json.loads(body) == {"error": "Unauthorized"}


# --- remote code (lab/sglang_sim/sglang/srt/remote_code.py), cases from transformers' AutoConfig.from_pretrained
# and dynamic_module_utils: auto_map {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}, as Kimi-K2.5 ships.
KIMI_AUTO_MAP = {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}
CANARY_MODULE = (
    "import os\n"
    "from .kimi_helper import MARK\n"
    "with open(os.environ['CANARY'], 'a') as f:\n"
    "    f.write(f'{MARK} uid={os.getuid()}\\n')\n"
    "class KimiK25Config:\n"
    "    model_type = 'kimi_k25'\n"
)


@pytest.fixture
def kimi(tmp_path, monkeypatch):
    folder = tmp_path / "Kimi-K2.5-INT4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(TARGET_CONFIG, auto_map=KIMI_AUTO_MAP, model_type="kimi_k25")))
    (folder / "configuration_kimi_k25.py").write_text(CANARY_MODULE)
    (folder / "kimi_helper.py").write_text("MARK = 'loaded'\n")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("CANARY", str(tmp_path / "canary"))
    yield folder
    for name in [m for m in sys.modules if m.startswith("transformers_modules")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p != str(tmp_path / "hf" / "modules")]


def test_trust_remote_code_runs_the_auto_map_module_from_its_modules_cache_copy(sglang, kimi, tmp_path):
    config = sglang.model_config.ModelConfig(str(kimi), trust_remote_code=True)
    assert config.model_type == "kimi_k25"  # the simulator keeps config.json's dict
    assert (tmp_path / "canary").read_text() == f"loaded uid={os.getuid()}\n"  # ran, relative import too
    copy = tmp_path / "hf" / "modules" / "transformers_modules" / "Kimi_hyphen_K2_dot_5_hyphen_INT4"
    assert sorted(p.name for p in copy.iterdir()) == ["__init__.py", "configuration_kimi_k25.py", "kimi_helper.py"]
    assert (copy.parent / "__init__.py").is_file()
    module = sys.modules["transformers_modules.Kimi_hyphen_K2_dot_5_hyphen_INT4.configuration_kimi_k25"]
    assert module.__file__ == str(copy / "configuration_kimi_k25.py")  # the copy ran, not the folder's file


def test_without_trust_remote_code_the_module_does_not_run(sglang, kimi, tmp_path):
    sglang.model_config.ModelConfig(str(kimi))
    assert not (tmp_path / "canary").exists()


def test_remote_code_refusals_are_transformers(sglang, kimi, tmp_path):
    ModelConfig = sglang.model_config.ModelConfig
    (kimi / "configuration_kimi_k25.py").write_text(
        "try:\n    import flash_attn_absent\nexcept:\n    pass\nimport torch_absent.nn\nclass KimiK25Config: pass\n"
    )
    with pytest.raises(ImportError) as exc:  # check_imports: the try/except import is allowed
        ModelConfig(str(kimi), trust_remote_code=True)
    assert str(exc.value) == (
        "This modeling file requires the following packages that were not found in your environment: "
        "torch_absent. Run `pip install torch_absent`"
    )
    (kimi / "configuration_kimi_k25.py").unlink()
    with pytest.raises(OSError, match="does not appear to have a file named configuration_kimi_k25.py"):
        ModelConfig(str(kimi), trust_remote_code=True)
    (kimi / "configuration_kimi_k25.py").write_text("class Other: pass\n")
    with pytest.raises(AttributeError, match="KimiK25Config"):  # getattr(module, class_name)
        ModelConfig(str(kimi), trust_remote_code=True)


def test_server_args_pass_trust_remote_code_to_the_model_config(sglang, kimi, tmp_path):
    path = tmp_path / "kimi.yaml"
    path.write_text(yaml.safe_dump({"model-path": str(kimi), "trust-remote-code": True, "tp-size": 1}))
    sglang.server_args.prepare_server_args(["--config", str(path)]).resolve_once()
    assert (tmp_path / "canary").read_text().startswith("loaded uid=")


DASHBOARD = Path(__file__).parents[2] / "monitoring" / "grafana-dashboard.json"
PROMQL_WORDS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right", "offset"}


def promql_metrics(expr: str) -> set:
    """The metric names a PromQL expression selects: identifiers that are no function (followed by
    `(`), keyword, label matcher ({...}), grouping label list, range ([...]) or string."""
    text = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\(?)", text)
    return {name for name, call in names if not call and name not in PROMQL_WORDS}


def exported_families(text: str) -> set:
    """Every series name a Prometheus text exposition can hold (a histogram's _bucket/_sum/_count)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names |= {name} | ({f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else set())
    return names


def test_every_dashboard_query_names_a_metric_the_lab_exports(lab):
    """monitoring/grafana-dashboard.json: each query's metrics are in the simulator's /metrics (SGLang's
    names), the agent's metrics file (metrics.py) or the bench's (tools/bench/exported.py); a name none
    exports fails it."""
    from sglang_pve.agent import metrics, switch_history
    from sglang_pve.tools.bench import exported as bench_exported

    sim = lab.start(lab.config("eagle3-2step", spec=True, random_seed=7))
    sim.wait_log(r"The server is fired up and ready to roll!")
    agent = metrics.render({"servers": [], "gpus": [], "holders": []}, None, switch_history.read("/nonexistent"))
    bench = bench_exported.render({})  # the families' HELP and TYPE lines, with or without figures
    exported = exported_families(sim.http("/metrics")[1].decode()) | exported_families(agent)
    exported |= exported_families(bench)
    queries = [t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel["targets"]]
    assert len(queries) >= 10 and all(promql_metrics(q) for q in queries)
    missing = {q: promql_metrics(q) - exported for q in queries if promql_metrics(q) - exported}
    assert not missing, missing
    assert promql_metrics("rate(sglang:made_up_total[1m])") - exported == {"sglang:made_up_total"}
