"""bench/mutation.py: its targets exist (a moved module or test file would silently score nothing),
a mutant of each kind applies, and the report counts per module and in total."""

import ast
import importlib.util

from tests.conftest import PROJECT

_SPEC = importlib.util.spec_from_file_location("mutation", PROJECT / "bench" / "mutation.py")
mutation = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mutation)


def test_every_target_module_and_its_tests_exist():
    for module, tests in mutation.TARGETS.items():
        assert (PROJECT / module).is_file(), module
        assert tests and all((PROJECT / test).is_file() for test in tests), (module, tests)


def test_each_kind_of_mutant_changes_the_code():
    source = "def f(a, b):\n    if a < 1 and not b:\n        g(shlex.quote(a))\n    return True\n"
    found = mutation.sites(ast.parse(source))
    kinds = ["bool", "boolop", "compare", "drop-call", "not", "number", "unquote"]
    assert sorted({kind for _, kind, _ in found}) == kinds
    for site in found:
        mutated, what = mutation.mutate(source, site)
        assert ast.unparse(ast.parse(mutated)) != ast.unparse(ast.parse(source)), what


def test_scores_per_module_and_in_total():
    candidates = [("a.py", (1, "bool", 1)), ("a.py", (2, "bool", 2)), ("b.py", (1, "not", 1))]
    results = [
        {"module": "a.py", "mutant": "x", "outcome": "killed"},
        {"module": "a.py", "mutant": "y", "outcome": "survived"},
        {"module": "b.py", "mutant": "z", "outcome": "killed (timeout)"},
    ]
    assert mutation.score(results, candidates) == {
        "a.py": {"killed": 1, "run": 2, "sites": 2},
        "b.py": {"killed": 1, "run": 1, "sites": 1},
        "total": {"killed": 2, "run": 3, "sites": 3},
    }
    assert mutation._score_line({"killed": 1, "run": 2, "sites": 5}) == "1/2 killed (50 %), 5 sites"
    assert mutation._score_line({"killed": 0, "run": 0, "sites": 5}) == "0/0 killed (-), 5 sites"
