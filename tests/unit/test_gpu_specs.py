"""The GPU tests' agent specs, checked where CI runs: each one through the agent's own parser
(sglang_pve/agent/spec.py), so a key the contract adds or renames fails here and not first on a
real GPU; and no GPU test writes a spec of its own instead of taking one from tests/gpu/specs.py."""

import ast
from pathlib import Path

import pytest

from sglang_pve.agent import spec as spec_module
from tests.gpu import specs

GPU_TESTS = Path(specs.__file__).parent


@pytest.mark.parametrize("name", sorted(specs.SPECS))
def test_every_gpu_test_spec_is_one_the_agent_accepts(name, tmp_path):
    data = specs.SPECS[name](tmp_path)
    parsed = spec_module.load(str(specs.write(tmp_path / f"{name}.lifecycle.json", data)))
    assert parsed.server == name and parsed.unit == specs.UNIT
    assert spec_module.to_json(parsed) == spec_module.to_json(spec_module.parse(data))  # nothing dropped or added
    assert parsed.stop_timeout_s == spec_module.Lifecycle().stop_timeout_s  # a default the test does not change


def test_gpu_tests_write_no_spec_of_their_own():
    """A dict literal with the spec's own keys anywhere in tests/gpu but specs.py is a hand-written spec."""
    keys = {f.name for f in spec_module.file_fields(spec_module.Spec)}
    for path in sorted(GPU_TESTS.glob("*.py")):
        if path.name == "specs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                written = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                where = f"{path.name}:{node.lineno}"
                assert len(written & keys) < 3, f"{where} writes an agent spec; use tests/gpu/specs.py"
