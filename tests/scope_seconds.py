"""Write tests/scope_seconds.json, the weights `make test`'s workers hand the units of work out by
(tests/conftest.py pytest_collection_modifyitems), from the JUnit XML of a whole CI run:

    .venv/bin/python -m pytest -n 3 --dist loadscope --no-loadscope-reorder --junitxml=/tmp/ci-junit.xml
    .venv/bin/python tests/scope_seconds.py /tmp/ci-junit.xml

A unit's weight is the sum of its tests' times (pytest's junit_duration_report "total": setup, call
and teardown), rounded to the second."""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import SCOPE_SECONDS, scope_of  # noqa: E402


def unit_seconds(junit: Path) -> dict[str, int]:
    """Seconds per unit of work; a testcase's classname is its module's dotted path (no test classes here)."""
    totals: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        scope = scope_of(nodeid)
        totals[scope] = totals.get(scope, 0.0) + float(case.get("time") or 0)
    return {scope: round(total) for scope, total in sorted(totals.items())}


if __name__ == "__main__":
    SCOPE_SECONDS.write_text(json.dumps(unit_seconds(Path(sys.argv[1])), indent=1) + "\n")
