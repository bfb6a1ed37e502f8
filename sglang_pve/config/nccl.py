"""NCCL variables a profile may set, each checked against what NCCL accepts.

NCCL reads unknown NCCL_* variables silently and ignores bad values with at most a warning, so a
typo (NCCL_PROTOCOL=LL) or a bad value (NCCL_PROTO=LL256) would quietly cost the tuning that the
profile exists for. Names and value sets follow NCCL's environment-variable documentation (2.2x).
Only the variables below may be set, never loader knobs (NCCL_NET_PLUGIN, LD_PRELOAD), and every
value is in a safe ASCII alphabet: nccl.env and /etc/nccl.conf are read by every NCCL process on
the host, line by line and unquoted, so a value can never add a line there.
"""

import re
from collections.abc import Callable
from difflib import get_close_matches

from sglang_pve.config.errors import Problem
from sglang_pve.config.safe import ascii_digits

# The NCCL tuning profiles every deploy knows (host data ``nccl_profiles`` replaces them whole;
# extend them with {**PROFILES, "mine": {...}}): name -> {NCCL variable: value}. Exactly one is
# active everywhere a process can start from (units, /etc/nccl.conf, the venv's startup hook, the
# shell rc). Measured on 8x PCIe RTX PRO 6000: 89 tok/s single-stream with pcie-tuned vs 63 tok/s without.
_PCIE_TUNED: dict[str, str | int] = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": 16,
    "NCCL_BUFFSIZE": 16777216,
    "NCCL_NTHREADS": 512,
}
PROFILES: dict[str, dict[str, str | int]] = {
    "pcie-tuned": _PCIE_TUNED,
    # Diagnostic: cures the first-collective hangs of P2P over some PCIe topologies.
    "p2p-disabled": {"NCCL_P2P_DISABLE": 1},
    # NCCL's own defaults: no overrides at all.
    "nccl-defaults": {},
    # Mixed: the tuned profile, but NCCL may still pick Simple for large (prefill) messages, where
    # LL alone measured 2.9x slower than the defaults at 32 MiB on H200 x2 (bench/NCCL_PROBE_H200X2.md).
    "pcie-tuned-ll-simple": {**_PCIE_TUNED, "NCCL_PROTO": "LL,Simple"},
}
DEFAULT_PROFILE = "pcie-tuned"

_PROTOCOLS = {"LL", "LL128", "SIMPLE"}
_ALGORITHMS = {"RING", "TREE", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT"}
_P2P_LEVELS = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"}
_DEBUG_LEVELS = {"VERSION", "WARN", "INFO", "TRACE"}
_WORDS = re.compile(r"[A-Za-z0-9_.,:=^-]{1,256}")
_VALUE = re.compile(r"[A-Za-z0-9_.,:;=^-]{1,256}")  # every variable's values fit in this


def _listing(allowed: set[str], what: str) -> Callable[[str], str | None]:
    """NCCL_PROTO / NCCL_ALGO: comma list of names, optionally negated with a leading ^;
    NCCL_ALGO also takes per-collective `func:algo` lists (e.g. allreduce:tree)."""

    def check(value: str) -> str | None:
        body = value[1:] if value.startswith("^") else value
        for item in body.split(";" if ":" in body else ","):
            names = item.split(":", 1)[-1] if ":" in item else item
            for name in names.split(","):
                if name.strip().upper() not in allowed:
                    return f"{name!r} is not a {what} NCCL knows ({', '.join(sorted(allowed))})"
        return None

    return check


def _one_of(allowed: set[str], integer_ok: bool = False) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value.upper() in allowed or (integer_ok and ascii_digits(value)):
            return None
        extra = " or an integer" if integer_ok else ""
        return f"expected one of {', '.join(sorted(allowed))}{extra}"

    return check


def _integer(minimum: int = 0, choices: tuple[int, ...] = ()) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not ascii_digits(value):
            return "expected an integer (plain digits, no units)"
        if choices and int(value) not in choices:
            return f"expected one of {', '.join(map(str, choices))}"
        if int(value) < minimum:
            return f"expected an integer >= {minimum}"
        return None

    return check


_FLAG = _integer(choices=(0, 1))


def _STRING(value: str) -> str | None:
    """Interface and HCA lists, debug subsystems: e.g. ^lo,docker0 / =mlx5_0:1 / INIT,NET."""
    return None if _WORDS.fullmatch(value) else "expected a non-empty list in [A-Za-z0-9_.,:=^-]"


VARIABLES = {
    "NCCL_PROTO": _listing(_PROTOCOLS, "protocol"),
    "NCCL_ALGO": _listing(_ALGORITHMS, "algorithm"),
    "NCCL_P2P_LEVEL": _one_of(_P2P_LEVELS, integer_ok=True),
    "NCCL_SHM_USE_CUDA_MEMCPY": _FLAG,
    "NCCL_P2P_DISABLE": _FLAG,
    "NCCL_SHM_DISABLE": _FLAG,
    "NCCL_IB_DISABLE": _FLAG,
    "NCCL_NET_GDR_LEVEL": _one_of(_P2P_LEVELS, integer_ok=True),
    "NCCL_CUMEM_ENABLE": _FLAG,
    "NCCL_NVLS_ENABLE": _FLAG,
    "NCCL_CROSS_NIC": _integer(choices=(0, 1, 2)),
    "NCCL_MAX_NCHANNELS": _integer(minimum=1),
    "NCCL_MIN_NCHANNELS": _integer(minimum=1),
    "NCCL_BUFFSIZE": _integer(minimum=1),
    "NCCL_NTHREADS": _integer(choices=(64, 128, 256, 512)),
    "NCCL_SOCKET_IFNAME": _STRING,
    "NCCL_IB_HCA": _STRING,
    "NCCL_DEBUG": _one_of(_DEBUG_LEVELS),
    "NCCL_DEBUG_SUBSYS": _STRING,
}


def check_profile(name: str, variables: object) -> list[Problem]:
    """Problems of one profile; `variables` is what the user wrote (any type)."""
    key = f"nccl_profiles.{name}"
    if not isinstance(variables, dict):
        return [Problem(key, variables, "a profile is a mapping of NCCL variable to value", "write {VAR: value}")]
    problems = []
    for var, raw in variables.items():
        if var not in VARIABLES:
            close = get_close_matches(str(var), VARIABLES, n=1)
            hint = f"did you mean {close[0]}?" if close else f"use one of {', '.join(sorted(VARIABLES))}"
            problems.append(Problem(f"{key}.{var}", raw, "not an NCCL variable this toolkit knows", hint))
            continue
        if isinstance(raw, bool) or not isinstance(raw, (str, int)):
            problems.append(Problem(f"{key}.{var}", raw, "expected a string or an integer", "write e.g. 1 or LL"))
            continue
        value = str(raw)
        error = VARIABLES[var](value) if _VALUE.fullmatch(value) else f"expected a value in {_VALUE.pattern}"
        if error:
            problems.append(Problem(f"{key}.{var}", raw, error, f"set a value NCCL accepts for {var}"))
    return problems
