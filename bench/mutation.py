"""Mutation testing bench: do the unit tests notice when the code is wrong?

    python bench/mutation.py                  # a seeded sample of mutants over the default targets
    python bench/mutation.py --sample 0 --list sglang_pve/agent/gate.py   # every site, no runs

A small AST mutator (no dependency; the machine is shared, so it runs a bounded sample, one mutant
at a time, only the unit tests of the mutated module): it flips comparisons (< <=, == !=, in
not in), and/or, not, True/False, shifts integer constants by one, drops a call statement
(`procs.kill(...)` -> `pass`), and unwraps quoting (`QuoteString(x)`, `shlex.quote(x)` -> `x`).
Each mutant is written over the module, its tests run with a timeout, the module is restored.
A mutant survives when the tests still pass. Prints each survivor (file:line, what changed) and
the score = killed / run, per module and in total.
"""

import argparse
import ast
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# module -> the unit tests that cover it
TARGETS = {
    "sglang_pve/agent/gate.py": ["tests/unit/test_agent_gate.py", "tests/unit/test_agent_logs.py"],
    "sglang_pve/agent/reaper.py": ["tests/unit/test_agent_reaper.py", "tests/unit/test_agent_stopping.py"],
    "sglang_pve/agent/watchdog.py": [
        "tests/unit/test_agent_watchdog.py",
        "tests/unit/test_agent_logs.py",
        "tests/unit/test_agent_stopping.py",
    ],
    "sglang_pve/agent/bounded.py": ["tests/unit/test_agent_bounded.py"],
    "sglang_pve/agent/logfollow.py": [
        "tests/unit/test_agent_logfollow.py",
        "tests/unit/test_agent_logs.py",
        "tests/unit/test_agent_real_logs.py",
    ],
    "sglang_pve/agent/phases.py": [
        "tests/unit/test_agent_phases.py",
        "tests/unit/test_agent_logs.py",
        "tests/unit/test_agent_real_logs.py",
    ],
    "sglang_pve/agent/switch.py": [
        "tests/unit/test_agent_switch.py",
        "tests/unit/test_agent_transient.py",
        "tests/unit/test_releases.py",
    ],
    "sglang_pve/agent/release_store.py": ["tests/unit/test_releases.py", "tests/unit/test_agent_switch.py"],
    "sglang_pve/agent/lease.py": ["tests/unit/test_agent_lease.py"],
    "sglang_pve/provision/container.py": [
        "tests/unit/test_proxmox_provision.py",
        "tests/unit/test_proxmox_token_perm.py",
        "tests/unit/test_snapshot_retention.py",
    ],
    "sglang_pve/deploy/operations/files.py": ["tests/unit/test_operations.py", "tests/unit/test_json_cases.py"],
    "sglang_pve/deploy/operations/systemd.py": ["tests/unit/test_operations.py", "tests/unit/test_json_cases.py"],
}
_FLIP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_QUOTERS = {"QuoteString", "quote"}


def sites(tree: ast.AST) -> list:
    """(index in ast.walk order, kind, line) of every place a mutation applies."""
    found = []
    for index, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
            found.append((index, "compare", line))
        elif isinstance(node, ast.BoolOp):
            found.append((index, "boolop", line))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            found.append((index, "not", line))
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            found.append((index, "bool", line))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
            found.append((index, "number", line))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            found.append((index, "drop-call", line))
        elif isinstance(node, ast.Call) and _name(node.func) in _QUOTERS and len(node.args) == 1:
            found.append((index, "unquote", line))
    return found


def _name(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def mutate(source: str, site: tuple) -> tuple:
    """(mutated source, description) for one site."""
    tree = ast.parse(source)
    index, kind, line = site
    node = list(ast.walk(tree))[index]
    if kind == "compare":
        old = type(node.ops[0])
        node.ops[0] = _FLIP[old]()
        what = f"{old.__name__} -> {_FLIP[old].__name__}"
    elif kind == "boolop":
        old = type(node.op)
        node.op = ast.Or() if old is ast.And else ast.And()
        what = f"{old.__name__} -> {type(node.op).__name__}"
    elif kind == "not":
        node.op = ast.UAdd()  # +x keeps the expression, drops the negation
        what = "not x -> x"
    elif kind == "bool":
        node.value = not node.value
        what = f"{not node.value} -> {node.value}"
    elif kind == "number":
        old = node.value
        node.value = old + 1
        what = f"{old} -> {node.value}"
    elif kind == "drop-call":
        what = f"dropped {ast.unparse(node)[:60]}"
        node.value = ast.Constant(None)
    else:
        what = f"unquoted {ast.unparse(node)[:60]}"
        arg = node.args[0]
        node.func, node.args = ast.Name("str", ast.Load()), [arg]
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), f"line {line}: {what}"


def run_tests(tests: list, timeout_s: float) -> str:
    existing = [t for t in tests if (ROOT / t).exists()]
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--timeout", "60", *existing]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "killed (timeout)"
    return "survived" if done.returncode == 0 else "killed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", default=list(TARGETS))
    parser.add_argument("--sample", type=int, default=60, help="mutants in all (0: every site)")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--list", action="store_true", help="only list the sites")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    candidates = []
    for module in args.modules:
        if (ROOT / module).exists():
            candidates += [(module, site) for site in sites(ast.parse((ROOT / module).read_text()))]
    if args.list:
        for module, site in candidates:
            print(module, *site)
        return 0
    chosen = (
        candidates
        if args.sample == 0
        else random.Random(args.seed).sample(candidates, min(args.sample, len(candidates)))
    )
    signal.signal(signal.SIGTERM, _interrupted)  # a kill by PID still restores the module (finally below)
    results, started = [], time.monotonic()
    for module, site in sorted(chosen, key=lambda c: (c[0], c[1][2])):
        path = ROOT / module
        original = path.read_text()
        mutated, what = mutate(original, site)
        try:
            path.write_text(mutated)
            outcome = run_tests(TARGETS.get(module, []), args.timeout)
        finally:
            path.write_text(original)
        results.append({"module": module, "mutant": what, "outcome": outcome})
        print(f"{outcome:17} {module} {what}", flush=True)
    scores = score(results, candidates)
    print()
    width = max(len(module) for module in scores)
    for module, counts in scores.items():
        print(f"{module:{width}}  {_score_line(counts)}")
    print(f"{time.monotonic() - started:.0f}s")
    if args.json:
        Path(args.json).write_text(json.dumps({"scores": scores, "results": results}, indent=2))
    return 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def score(results: list, candidates: list) -> dict:
    """{module: {"killed", "run", "sites"}} for each module in `candidates`, then "total"."""
    scores = {}
    for module, _ in candidates:
        scores.setdefault(module, {"killed": 0, "run": 0, "sites": 0})["sites"] += 1
    for result in results:
        counts = scores[result["module"]]
        counts["run"] += 1
        counts["killed"] += result["outcome"].startswith("killed")
    scores["total"] = {key: sum(c[key] for c in scores.values()) for key in ("killed", "run", "sites")}
    return scores


def _score_line(counts: dict) -> str:
    percent = f"{100 * counts['killed'] / counts['run']:.0f} %" if counts["run"] else "-"
    return f"{counts['killed']}/{counts['run']} killed ({percent}), {counts['sites']} sites"


if __name__ == "__main__":
    raise SystemExit(main())
