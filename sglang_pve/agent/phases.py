"""SGLang's startup log lines -> startup phase, crash reason, and probe noise.

Lines look like `[2026-07-20 10:00:00 TP0] Load weight begin. avail mem=93.12 GB`; the tag after
the time names the rank (`TP0`, `DP0 TP3`, ...), main-process lines have none, and tqdm bars
(`Multi-thread loading shards: 45% Completed | 29/64 [...]`, `Capturing batches (bs=8 ...)`) have
no prefix at all. Phases, in order (real excerpts: tests/unit/fixtures/sglang_logs/):

| phase      | entered by (v0.5.9 and HEAD spellings)                                             |
|------------|------------------------------------------------------------------------------------|
| launch     | (process start; nothing recognised yet; stall limit = dist_init's)                 |
| dist_init  | `Init torch distributed begin.` / `... ends. elapsed=...`                          |
| weights    | `Load weight begin`, `Multi-thread loading shards`, `Loading ... checkpoint shards` |
| kv_cache   | `Load weight end` (SGLang sizes and allocates the KV pool right after the weights and |
|            | logs nothing when it begins), `KV Cache is allocated. ...`, `Memory pool end. ...` |
| draft      | speculative only: a rank's second `Load weight begin`; `Capture draft cuda graph begin` |
|            | (v0.5.9), `Capture draft decode/extend CUDA graph begin/end` (HEAD); the draft's   |
|            | weight/KV/`Capturing batches` lines stay in draft                                  |
| cuda_graph | `Capture .*(cuda|CUDA) graph (begin|end)` (v0.5.9 `Capture cuda graph begin`, HEAD |
|            | `Capture target decode CUDA graph begin. backend=...`), `Capturing batches`,        |
|            | DeepGEMM JIT lines                                                                 |
| http       | `max_total_num_tokens=...` (scheduler ready), `Started server process`,            |
|            | `Application startup complete.`, `Uvicorn running on http://...`                   |
| warmup     | the scheduler's `Prefill batch` / `Decode batch` lines (the warm-up request's)      |
| ready      | `The server is fired up and ready to roll!` (terminal); a TP group rank above 0:     |
|            | `Dummy health check server started in background thread at HOST:PORT` (its only    |
|            | server: sgl-project/sglang engine.py Engine._launch_subprocesses, node_rank >= 1,  |
|            | commit 001067ff; utils/common.py launch_dummy_health_check_server)                 |

Ranks log in parallel, so a late line of an earlier phase (TP7's `Load weight end` after TP0's
`KV Cache is allocated`) never moves the phase back. Draft is the exception: it can follow
cuda_graph (v0.5.9 captures the target's graphs before loading the draft), and a target capture
*begin* after it moves on to cuda_graph again (HEAD captures target graphs after the draft loaded).

Progress is what SGLang's scheduler, loader and launcher print (`is_progress`), never an HTTP
access line: any client (a Prometheus scrape, a 404 scanner, `status`) makes those, wedged server
or not. Access lines are uvicorn's `INFO:     127.0.0.1:50200 - "GET /x HTTP/1.1" 404`;
huggingface_hub's debug lines about its own requests (`https://huggingface.co:443 "HEAD /... HTTP/1.1"
404`) are the loader at work, not access lines. Probe noise (`is_noise`) is no progress either.

Fatal, before ready, means SGLang's own markers only: `... hit an exception` (scheduler,
detokenizer), `Received sigquit from a child process`, `Scheduler watchdog timeout`,
`Initialization failed`, `scheduler died during initialization` (or the main process exiting).
A traceback alone is not fatal: SGLang logs handled ones and keeps loading, and Python prints
`Exception ignored in ...` ones that change nothing. The crash reason is the exception that
propagated: the last exception line of the last traceback (a chained traceback prints the
cause first), `Exception ignored in` blocks skipped; else the first fatal line.
"""

import re
import time
from dataclasses import dataclass, field

from sglang_pve.agent import output
from sglang_pve.agent.spec import STALL_PHASES

PHASES = ("launch", *STALL_PHASES, "ready")  # the order of spec.StallTimeouts' fields
# status only (agent/status.py), never the tracker's: the ready line seen, the gate's /health 200 not yet
GATE = "gate"
_ORDER = {phase: index for index, phase in enumerate(PHASES)}

_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?(?: ([^\]]*))?\] ?")

# (signal, pattern) in priority order: the first match wins.
_SIGNALS = [
    (sig, re.compile(pattern))
    for sig, pattern in (
        (
            "ready",
            r"The server is fired up and ready to roll"
            r"|Dummy health check server (?:started|scheduled)|Starting dummy health check server",
        ),
        ("draft_graph", r"Capture draft.*(?:cuda|CUDA) graph (?:begin|end)"),
        ("graph_begin", r"Capture .*(?:cuda|CUDA) graph begin"),
        ("graph_end", r"Capture .*(?:cuda|CUDA) graph end"),
        ("capturing", r"Capturing batches|DeepGEMM JIT"),
        ("weights_begin", r"Load weight begin"),
        ("weights", r"Multi-thread loading shards|Loading \w+ checkpoint shards"),
        ("kv_cache", r"Load weight end|KV Cache is allocated|Memory pool end"),
        ("dist_init", r"Init torch distributed (?:begin|ends)"),
        (
            "http",
            r"max_total_num_tokens=|Started server process|Waiting for application startup"
            r"|Application startup complete|Uvicorn running on",
        ),
        ("request", r"Prefill batch|Decode batch"),
    )
]
_FATAL = re.compile(
    r"hit an exception|Received sigquit from a child process|Scheduler watchdog timeout"
    r"|Initialization failed|scheduler died during initialization"
)
# uvicorn's access log: `<client ip>:<port> - "<METHOD> <path> HTTP/1.1" <status>`
_ACCESS = re.compile(
    r'(?:\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9A-Fa-f:]*:[0-9A-Fa-f:]*\]?):\d+ - "[A-Z]+ \S* HTTP/[\d.]+" \d{3}'
)
_IGNORED = re.compile(r"^Exception ignored (?:in|while)")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::|$)")
# Lines that our own probes and monitoring cause: they are no sign of a working server.
_NOISE = re.compile(
    r'"GET /(?:health|health_generate|metrics|model_info|get_model_info|server_info|get_server_info'
    r'|v1/models)[?" ][^"]*"? ?\d{3}'
    r"|Health check failed"
    r"|Prefill batch[^#]*#new-seq: 1, #new-token: 1,"  # the 1-token generation of /health_generate
)


@dataclass(frozen=True)
class Line:
    text: str
    message: str  # the text after the `[time rank]` prefix
    rank: str  # "TP0", "DP0 TP3"; "" for the main process and unprefixed output
    stamp: float | None  # epoch seconds of the prefix (local time, as SGLang writes it)


def parse_line(text: str) -> Line:
    match = _PREFIX.match(text)
    if not match:
        return Line(text, text, "", None)
    try:
        stamp = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        stamp = None
    return Line(text, text[match.end() :], match.group(2) or "", stamp)


def signal(message: str) -> str | None:
    """The stateless class of a message: a key of _SIGNALS, or None."""
    for name, pattern in _SIGNALS:
        if pattern.search(message):
            return name
    return None


def is_fatal(line: Line) -> bool:
    return bool(_FATAL.search(line.message))


def is_exception(line: Line) -> bool:
    """A bare `ValueError: ...` line: the last line of a Python traceback."""
    return not line.rank and line.stamp is None and bool(_EXCEPTION.match(line.text))


def is_noise(text: str) -> bool:
    """True for lines caused by health probes and monitoring scrapes, not by real work."""
    return bool(_NOISE.search(text))


def is_access(text: str) -> bool:
    """An HTTP access line of the server (any path, any status): no sign of work by itself."""
    return bool(_ACCESS.search(text))


def is_progress(text: str) -> bool:
    """A line that shows the server working: not the agent's own, not probe noise, not access."""
    return not output.is_own(text) and not is_noise(text) and not is_access(text)


@dataclass
class PhaseTracker:
    """Feed it the log's lines in order; it knows the phase, when it began, and any crash."""

    speculative: bool = False
    phase: str = "launch"
    since: float | None = None  # log time of the line that entered the phase
    last_stamp: float | None = None
    fatal: str | None = None  # first fatal line
    exception: str | None = None  # the last propagated exception line (of the last traceback)
    _weight_loads: dict[str, int] = field(default_factory=dict)  # rank: `Load weight begin` lines seen
    _ignored_block: bool = False  # inside an `Exception ignored in ...` traceback

    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    @property
    def reason(self) -> str | None:
        """The crash reason: the propagated exception, else the first fatal line."""
        return self.exception or self.fatal

    def feed(self, text: str) -> str | None:
        """Account for one line; return the new phase when this line changed it."""
        line = parse_line(text)
        if line.stamp is not None:
            self.last_stamp = line.stamp
        if self.ready:
            return None
        if _IGNORED.match(line.message):
            self._ignored_block = True
        exception = is_exception(line)
        if exception:
            if not self._ignored_block:
                self.exception = line.text.strip()
            self._ignored_block = False
        fatal = is_fatal(line)
        if fatal:
            self.fatal = self.fatal or line.message.strip()
        if exception or fatal:
            return None
        target = self._target(signal(line.message), line.rank)
        if target is None or target == self.phase:
            return None
        self.phase = target
        self.since = line.stamp if line.stamp is not None else self.last_stamp
        return target

    def _target(self, sig: str | None, rank: str) -> str | None:
        if sig is None:
            return None
        if sig == "ready":
            return "ready"
        before_http = _ORDER[self.phase] < _ORDER["http"]
        if sig == "weights_begin":
            loads = self._weight_loads[rank] = self._weight_loads.get(rank, 0) + 1
            if self.speculative and loads >= 2 and before_http:
                return "draft"
            sig = "weights"
        if sig == "draft_graph":
            return "draft" if before_http else None
        if self.phase == "draft" and sig in ("capturing", "graph_end"):
            return None  # the draft's own capture progress
        target = {
            "graph_begin": "cuda_graph",
            "graph_end": "cuda_graph",
            "capturing": "cuda_graph",
            "request": "warmup",
        }.get(sig, sig)
        return target if _ORDER[target] > _ORDER[self.phase] else None
