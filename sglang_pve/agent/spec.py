"""The lifecycle spec: one JSON file per server configuration, the agent's only input.

The deploy renders `/etc/sglang/servers/NAME.lifecycle.json` from servers.yml; every key is
always present and unknown keys are refused (a typo must not silently fall back to a default):

```json
{"server": "baseline", "unit": "sglang-baseline.service", "unit_prefix": "sglang-",
 "log": "/var/log/sglang/baseline.log", "host": "127.0.0.1", "port": 8000,
 "speculative": false,
 "startup_timeout_s": 5400,
 "stop_timeout_s": 90,
 "stall_timeout_s": {"dist_init": 600, "weights": 900, "kv_cache": 600, "draft": 900,
                     "cuda_graph": 1200, "http": 300, "warmup": 900},
 "watchdog": {"interval_s": 30, "timeout_s": 60, "failures": 3, "max_restarts": 3,
              "window_s": 3600, "backoff_s": 30, "backoff_max_s": 600, "restart_on_crash": true},
 "gpu_free_timeout_s": 120, "gpu_idle_mib": 1024,
 "state_dir": "/var/lib/sglang-pve", "diagnoses_dir": "/var/lib/sglang-pve/diagnoses",
 "group": null}
```

- `server`: configuration name, contract.SERVER_NAME (used in unit and file names).
- `unit`: the systemd unit; it must start with `unit_prefix` and end in `.service`.
- `unit_prefix`: every unit of this toolkit starts with it; a process whose environment carries
  `SGLANG_PVE_UNIT=<unit_prefix>...` is "ours" (see holders.py).
- `log`: the server log (the unit's `StandardOutput=append:`), absolute path.
- `host`, `port`: where /health and /health_generate answer (the deploy maps a wildcard bind
  address with contract.probe_address: 0.0.0.0 -> 127.0.0.1, :: -> ::1).
- `speculative`: the second `Load weight begin` of a rank is the draft model.
- `startup_timeout_s`: overall startup deadline, from the gate's start to ready.
- `stop_timeout_s`: how long a requested stop may drain before the unit's processes are killed.
- `stall_timeout_s`: longest silence of the log allowed in each startup phase (phases.py);
  the period before the first line uses `dist_init`, the wait for /health after the ready line
  uses `warmup`.
- `watchdog`: liveness after ready (watchdog.py): probe every `interval_s` with `timeout_s`;
  `failures` consecutive counted failures mean wedged; at most `max_restarts` restarts within
  `window_s`, each start after a restart delayed `backoff_s * 2**(k-1)` capped at
  `backoff_max_s` (k = restarts in the window); `restart_on_crash`: a crash after ready is
  restarted under the same cap, window and backoff (crashes.py), else the unit stays failed.
- `gpu_free_timeout_s`: bound of every wait for GPUs to be released (prestart, poststop).
- `gpu_idle_mib`: memory.used per GPU at or below which the GPU counts as free.
- `state_dir`: offsets (`run/`), status records (`status/`), restart history (`restarts/`).
- `diagnoses_dir`: where failure diagnoses are written (diagnosis.py).
- `group`: null (or absent, as in specs rendered before it existed), or this server's place in
  a TP group (sglang_pve/config/tp_group.py):
  `{"name": "kimi", "rank": 1, "nnodes": 2, "dist_init_port": 20000,
  "addresses": ["10.0.0.4", "10.0.0.5"], "rank0_port": 8000}` (every rank's address, by rank;
  rank 0's HTTP port: the configuration's, the same on every rank). Its agents watch
  their peers (peers.py): rank 0 fails when any rank is gone, a rank above 0 when rank 0 is;
  ranks above 0 are ready at SGLang's dummy health server (phases.py); a wedged member fails
  instead of restarting alone (a lone rank cannot rejoin its group).

Durations are seconds, int or float, > 0 (`max_restarts` and `gpu_idle_mib` may be 0).

The dataclasses below are the schema, with the defaults and bounds in their fields' metadata:
the deploy's pydantic model (sglang_pve/config/lifecycle.py) is derived from them and render.py
writes a spec by passing it through `parse`, so the deploy cannot write what the agent refuses.
"""

import json
import math
from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields, is_dataclass
from typing import Any, ClassVar, NoReturn, Protocol, TypeVar, get_args, get_origin

from sglang_pve.agent import contract


class Dataclass(Protocol):
    """A dataclass instance (typeshed's _typeshed.DataclassInstance, which is no runtime module)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


# No `from __future__ import annotations` here: the field types are read at run time (below and in
# sglang_pve/config/lifecycle.py), so they must stay classes, not strings.
_Schema = TypeVar("_Schema", bound=Dataclass)


class SpecError(ValueError):
    """The spec file is missing, not JSON, or a key has a bad value; the message says which."""


def seconds(default: float, *, ge: float | None = None) -> float:
    """A duration field: > 0, or >= `ge`."""
    return field(default=default, metadata={"ge": ge} if ge is not None else {"gt": 0})


def count(default: int, *, ge: int) -> int:
    return field(default=default, metadata={"ge": ge})


@dataclass(frozen=True)
class StallTimeouts:
    """Longest log silence per startup phase (phases.py); the field order is the phase order."""

    dist_init: float = seconds(600)
    weights: float = seconds(900)  # shard bars move every few seconds to a minute
    # Above SGLang's own wait of up to 480 s for slower ranks around the KV pool sizing: a
    # healthy slow rank must not be taken for a stall.
    kv_cache: float = seconds(600)
    draft: float = seconds(900)
    cuda_graph: float = seconds(1200)
    http: float = seconds(300)
    warmup: float = seconds(900)  # SGLang's own warm-up request times out at 600 s


@dataclass(frozen=True)
class Watchdog:
    """Liveness after ready: /health_generate every interval; `failures` in a row restart the unit."""

    interval_s: float = seconds(30)
    timeout_s: float = seconds(60)  # above SGLang's 20 s detokenizer health timeout
    failures: int = count(3, ge=1)
    max_restarts: int = count(3, ge=0)
    window_s: float = seconds(3600)
    backoff_s: float = seconds(30, ge=0)
    backoff_max_s: float = seconds(600, ge=0)
    # A crash after ready (an NCCL abort, an Xid, SGLang's own watchdog-timeout exit) starts the
    # unit again under the same cap, window and backoff, counted together (crashes.py); false: it
    # stays failed with the reason. A failed start is never restarted (the switch reverts it).
    restart_on_crash: bool = True


@dataclass(frozen=True)
class Lifecycle:
    """The `lifecycle:` block of servers.yml: deadlines and the watchdog (1T model defaults)."""

    startup_timeout_s: float = seconds(5400)
    stop_timeout_s: float = seconds(90)
    stall_timeout_s: StallTimeouts = field(default_factory=StallTimeouts)
    watchdog: Watchdog = field(default_factory=Watchdog)
    gpu_free_timeout_s: float = seconds(120)
    gpu_idle_mib: int = count(1024, ge=0)


@dataclass(frozen=True)
class Group:
    """A TP group member's place (config/tp_group.py TpRank): what its peer watch needs."""

    name: str
    rank: int = field(metadata={"ge": 0})
    nnodes: int = field(metadata={"ge": 2})
    dist_init_port: int = field(metadata={"ge": 1, "le": 65535})
    addresses: list[str]  # by rank
    rank0_port: int = field(metadata={"ge": 1, "le": 65535})  # where rank 0's /health answers (its port)

    @property
    def peers(self) -> dict[int, str]:
        """The ranks this one watches, with their addresses: every other rank for rank 0, else rank 0."""
        if self.rank == 0:
            return dict(list(enumerate(self.addresses))[1:])
        return {0: self.addresses[0]}


STALL_PHASES = tuple(f.name for f in fields(StallTimeouts))
# Phases that borrow another phase's stall timeout (see phases.PHASES).
STALL_ALIASES = {"launch": "dist_init", "ready": "warmup"}
_ABSOLUTE = {"absolute": True}


@dataclass(frozen=True, kw_only=True)
class Spec(Lifecycle):
    server: str = field(metadata={"pattern": contract.SERVER_NAME})
    unit: str
    unit_prefix: str
    log: str = field(metadata=_ABSOLUTE)
    host: str
    port: int = field(metadata={"ge": 1, "le": 65535})
    speculative: bool
    state_dir: str = field(metadata=_ABSOLUTE)
    diagnoses_dir: str = field(metadata=_ABSOLUTE)
    group: Group | None = field(default=None, metadata={"nullable": True})
    path: str = field(default="<spec>", metadata={"file": False})  # where it was read from

    def stall_timeout(self, phase: str) -> float:
        """Allowed log silence in `phase` (a phases.PHASES name)."""
        timeout: float = getattr(self.stall_timeout_s, STALL_ALIASES.get(phase, phase))
        return timeout

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
    spec = _Checker(path).build(Spec, data, "")
    group = spec.group
    if group is not None and (len(group.addresses) != group.nnodes or group.rank >= group.nnodes):
        _Checker(path).fail("group", asdict(group), "nnodes addresses, one per rank, and a rank below nnodes")
    if not (spec.unit.startswith(spec.unit_prefix) and spec.unit.endswith(".service")):
        _Checker(path).fail(
            "unit", spec.unit, f"a unit name starting with unit_prefix {spec.unit_prefix!r} and ending in .service"
        )
    return spec


def to_json(spec: Spec) -> str:
    """The file text of a spec (what `load` reads back), keys sorted."""
    data = asdict(spec)
    del data["path"]
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def file_fields(cls: Dataclass | type[Dataclass]) -> list[Field[Any]]:
    return [f for f in fields(cls) if f.metadata.get("file", True)]


class _Checker:
    def __init__(self, path: str):
        self.path = path

    def fail(self, key: str, value: object, wanted: str) -> NoReturn:
        raise SpecError(
            f"spec {self.path}: key {key!r} is {value!r}; expected {wanted} (fix it in servers.yml and deploy again)"
        )

    def build(self, cls: type[_Schema], value: object, where: str) -> _Schema:
        """An instance of dataclass `cls` from a JSON object: every key present, none unknown."""
        if not isinstance(value, dict):
            self.fail(where.rstrip(".") or "<top level>", type(value).__name__, "a JSON object")
        known = [f.name for f in file_fields(cls)]
        # a nullable key may be absent: the specs of releases rendered before it existed stay readable
        value = {**{f.name: None for f in file_fields(cls) if f.metadata.get("nullable")}, **value}
        missing = [k for k in known if k not in value]
        unknown = sorted(set(value) - set(known))
        if missing:
            raise SpecError(
                f"spec {self.path}: missing key(s) {', '.join(where + k for k in missing)} "
                "(the deploy always renders every key)"
            )
        if unknown:
            raise SpecError(
                f"spec {self.path}: unknown key(s) {', '.join(where + k for k in unknown)}; known: {', '.join(known)}"
            )
        values = {f.name: self.value(f, value[f.name], where + f.name) for f in file_fields(cls)}
        if "path" in {f.name for f in fields(cls)}:
            values["path"] = self.path
        return cls(**values)

    def value(self, spec_field: Field[Any], value: object, key: str) -> object:
        kind, bounds = spec_field.type, spec_field.metadata
        if bounds.get("nullable"):
            if value is None:
                return None
            kind = next(k for k in get_args(kind) if k is not type(None))
        if get_origin(kind) is list:  # of strings
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                self.fail(key, value, "a list of non-empty strings")
            return value
        if isinstance(kind, type) and is_dataclass(kind):  # a nested block
            return self.build(kind, value, key + ".")
        if kind is bool:
            if not isinstance(value, bool):
                self.fail(key, value, "true or false")
            return value
        if kind is str:
            pattern = bounds.get("pattern")
            if not isinstance(value, str) or not value or (pattern and not pattern.fullmatch(value)):
                self.fail(key, value, "a non-empty string" + (f" matching {pattern.pattern}" if pattern else ""))
            if bounds.get("absolute"):
                if not value.startswith("/"):
                    self.fail(key, value, "an absolute path")
                return value.rstrip("/") or "/"
            return value
        wanted = "an integer" if kind is int else "a finite number"
        if (
            not isinstance(value, int if kind is int else (int, float))
            or isinstance(value, bool)
            or (kind is float and not math.isfinite(value))
            or not _within(value, bounds)
        ):
            self.fail(key, value, wanted + _describe(bounds))
        return value


def _within(value: float, bounds: Mapping[str, float]) -> bool:
    return (
        ("gt" not in bounds or value > bounds["gt"])
        and ("ge" not in bounds or value >= bounds["ge"])
        and ("le" not in bounds or value <= bounds["le"])
    )


def _describe(bounds: Mapping[str, float]) -> str:
    words = {"gt": ">", "ge": ">=", "le": "<="}
    return " and".join(f" {words[k]} {bounds[k]:g}" for k in ("gt", "ge", "le") if k in bounds)
