"""The lifecycle spec: one JSON file per server configuration, the agent's only input.

The deploy renders `/etc/sglang/servers/NAME.lifecycle.json` from servers.yml; every key is
always present and unknown keys are refused (a typo must not silently fall back to a default):

```json
{"server": "baseline", "unit": "sglang-baseline.service", "unit_prefix": "sglang-",
 "log": "/var/log/sglang/baseline.log", "host": "127.0.0.1", "port": 8000,
 "speculative": false,
 "startup_timeout_s": 5400,
 "stall_timeout_s": {"dist_init": 600, "weights": 900, "kv_cache": 300, "draft": 900,
                     "cuda_graph": 1200, "http": 300, "warmup": 900},
 "watchdog": {"interval_s": 30, "timeout_s": 60, "failures": 3, "max_restarts": 3,
              "window_s": 3600, "backoff_s": 30, "backoff_max_s": 600},
 "gpu_free_timeout_s": 120, "gpu_idle_mib": 1024,
 "state_dir": "/var/lib/sglang-pve", "diagnoses_dir": "/var/lib/sglang-pve/diagnoses"}
```

- `server`: configuration name, `[A-Za-z0-9_.-]+` (used in file names).
- `unit`: the systemd unit; it must start with `unit_prefix` and end in `.service`.
- `unit_prefix`: every unit of this toolkit starts with it; a process whose environment carries
  `SGLANG_PVE_UNIT=<unit_prefix>...` is "ours" (see holders.py).
- `log`: the server log (the unit's `StandardOutput=append:`), absolute path.
- `host`, `port`: where /health and /health_generate answer (0.0.0.0 is probed on 127.0.0.1).
- `speculative`: the second `Load weight begin` of a rank is the draft model.
- `startup_timeout_s`: overall startup deadline, from the gate's start to ready.
- `stall_timeout_s`: longest silence of the log allowed in each startup phase (phases.py);
  the period before the first line uses `dist_init`, the wait for /health after the ready line
  uses `warmup`.
- `watchdog`: liveness after ready (watchdog.py): probe every `interval_s` with `timeout_s`;
  `failures` consecutive counted failures mean wedged; at most `max_restarts` restarts within
  `window_s`, each start after a restart delayed `backoff_s * 2**(k-1)` capped at
  `backoff_max_s` (k = restarts in the window).
- `gpu_free_timeout_s`: bound of every wait for GPUs to be released (prestart, poststop).
- `gpu_idle_mib`: memory.used per GPU at or below which the GPU counts as free.
- `state_dir`: offsets (`run/`), status records (`status/`), restart history (`restarts/`).
- `diagnoses_dir`: where failure diagnoses are written (diagnosis.py).

Durations are seconds, int or float, > 0 (`max_restarts` and `gpu_idle_mib` may be 0).
"""

import json
import math
import re
from dataclasses import dataclass

STALL_PHASES = ("dist_init", "weights", "kv_cache", "draft", "cuda_graph", "http", "warmup")
# Phases that borrow another phase's stall timeout (see phases.PHASES).
STALL_ALIASES = {"launch": "dist_init", "ready": "warmup"}

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SpecError(ValueError):
    """The spec file is missing, not JSON, or a key has a bad value; the message says which."""


@dataclass(frozen=True)
class Watchdog:
    interval_s: float
    timeout_s: float
    failures: int
    max_restarts: int
    window_s: float
    backoff_s: float
    backoff_max_s: float


@dataclass(frozen=True)
class Spec:
    path: str
    server: str
    unit: str
    unit_prefix: str
    log: str
    host: str
    port: int
    speculative: bool
    startup_timeout_s: float
    stall_timeout_s: dict
    watchdog: Watchdog
    gpu_free_timeout_s: float
    gpu_idle_mib: float
    state_dir: str
    diagnoses_dir: str

    def stall_timeout(self, phase: str) -> float:
        """Allowed log silence in `phase` (a phases.PHASES name)."""
        return self.stall_timeout_s[STALL_ALIASES.get(phase, phase)]

    def state_file(self, kind: str, suffix: str = ".json") -> str:
        """state_dir/<kind>/<server><suffix>, e.g. state_file("run", ".offset")."""
        return f"{self.state_dir}/{kind}/{self.server}{suffix}"


def load(path: str) -> Spec:
    """Read and validate a spec file; raise SpecError naming the file, the key and the fix."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise SpecError(f"spec {path}: file not found (the deploy renders it from servers.yml)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SpecError(f"spec {path}: cannot read it as JSON: {error}") from None
    return parse(data, path)


def parse(data: object, path: str = "<spec>") -> Spec:
    check = _Checker(path)
    top = check.mapping(data, "", _TOP_KEYS)
    stall = check.mapping(top["stall_timeout_s"], "stall_timeout_s", STALL_PHASES)
    watchdog = check.mapping(top["watchdog"], "watchdog", _WATCHDOG_KEYS)
    spec = Spec(
        path=path,
        server=check.text(top, "server", pattern=_SERVER_NAME),
        unit=check.text(top, "unit"),
        unit_prefix=check.text(top, "unit_prefix"),
        log=check.abspath(top, "log"),
        host=check.text(top, "host"),
        port=check.integer(top, "port", low=1, high=65535),
        speculative=check.boolean(top, "speculative"),
        startup_timeout_s=check.seconds(top, "startup_timeout_s"),
        stall_timeout_s={phase: check.seconds(stall, phase, "stall_timeout_s.") for phase in STALL_PHASES},
        watchdog=Watchdog(
            interval_s=check.seconds(watchdog, "interval_s", "watchdog."),
            timeout_s=check.seconds(watchdog, "timeout_s", "watchdog."),
            failures=check.integer(watchdog, "failures", "watchdog.", low=1),
            max_restarts=check.integer(watchdog, "max_restarts", "watchdog.", low=0),
            window_s=check.seconds(watchdog, "window_s", "watchdog."),
            backoff_s=check.seconds(watchdog, "backoff_s", "watchdog.", low=0),
            backoff_max_s=check.seconds(watchdog, "backoff_max_s", "watchdog.", low=0),
        ),
        gpu_free_timeout_s=check.seconds(top, "gpu_free_timeout_s"),
        gpu_idle_mib=check.seconds(top, "gpu_idle_mib", low=0),
        state_dir=check.abspath(top, "state_dir"),
        diagnoses_dir=check.abspath(top, "diagnoses_dir"),
    )
    if not (spec.unit.startswith(spec.unit_prefix) and spec.unit.endswith(".service")):
        check.fail("unit", spec.unit, f"a unit name starting with unit_prefix {spec.unit_prefix!r} and ending in .service")
    return spec


_TOP_KEYS = (
    "server", "unit", "unit_prefix", "log", "host", "port", "speculative", "startup_timeout_s",
    "stall_timeout_s", "watchdog", "gpu_free_timeout_s", "gpu_idle_mib", "state_dir", "diagnoses_dir",
)
_WATCHDOG_KEYS = ("interval_s", "timeout_s", "failures", "max_restarts", "window_s", "backoff_s", "backoff_max_s")


class _Checker:
    def __init__(self, path: str):
        self.path = path

    def fail(self, key: str, value: object, wanted: str):
        raise SpecError(f"spec {self.path}: key {key!r} is {value!r}; expected {wanted} (fix it in servers.yml and deploy again)")

    def mapping(self, value: object, key: str, keys: tuple) -> dict:
        where = f"{key}." if key else ""
        if not isinstance(value, dict):
            self.fail(key or "<top level>", type(value).__name__, "a JSON object")
        missing = [k for k in keys if k not in value]
        unknown = sorted(set(value) - set(keys))
        if missing:
            raise SpecError(f"spec {self.path}: missing key(s) {', '.join(where + k for k in missing)} (the deploy always renders every key)")
        if unknown:
            raise SpecError(f"spec {self.path}: unknown key(s) {', '.join(where + k for k in unknown)}; known: {', '.join(keys)}")
        return value

    def text(self, data: dict, key: str, pattern: re.Pattern | None = None) -> str:
        value = data[key]
        if not isinstance(value, str) or not value or (pattern and not pattern.match(value)):
            self.fail(key, value, "a non-empty string" + (f" matching {pattern.pattern}" if pattern else ""))
        return value

    def abspath(self, data: dict, key: str) -> str:
        value = self.text(data, key)
        if not value.startswith("/"):
            self.fail(key, value, "an absolute path")
        return value.rstrip("/") or "/"

    def boolean(self, data: dict, key: str) -> bool:
        value = data[key]
        if not isinstance(value, bool):
            self.fail(key, value, "true or false")
        return value

    def integer(self, data: dict, key: str, prefix: str = "", *, low: int, high: int | None = None) -> int:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            self.fail(prefix + key, value, f"an integer >= {low}" + (f" and <= {high}" if high is not None else ""))
        return value

    def seconds(self, data: dict, key: str, prefix: str = "", *, low: float | None = None) -> float:
        value = data[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not number or (value <= 0 if low is None else value < low):
            self.fail(prefix + key, value, "a finite number > 0" if low is None else f"a finite number >= {low}")
        return value
