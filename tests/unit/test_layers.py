"""The layers where lint-imports cannot look, and the contracts' own lists kept whole.

lint-imports (`make lint`, contracts in pyproject.toml's [tool.importlinter]) reads the packages
sglang_pve and lab. deploy.py, tasks/, inventory/, group_data/ and bench/ are scripts that pyinfra
or python runs by path: their imports are read here, from their source.
"""

import ast
import importlib.util
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.unit.source_names import top_level_names

ROOT = Path(__file__).resolve().parents[2]
LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {contract["id"]: contract for contract in LINTER["contracts"]}
ROOMS = sorted(p.name for p in (ROOT / "sglang_pve").iterdir() if (p / "__init__.py").exists())
FIRST_PARTY = {"sglang_pve", "lab", "tests", "tasks", "inventory", "group_data", "bench", "deploy"}

# What each script may import of the first-party code: rooms of sglang_pve (`sglang_pve.<room>...`)
# and other first-party modules. deploy.py and tasks/ only call the packaged deploys
# (sglang_pve.deploys; tests/unit/test_deploys.py checks that they do nothing else). Inventories
# and group data are data: config's helpers, the measured NCCL profile (tools.nccl.measured), the
# contract's names (agent.spec); the lab's own inventory reads the lab's addresses and files
# (lab.layout). bench/ drives the lab and the test helpers.
RULES = {
    "deploy.py": ({"deploys"}, set()),
    "tasks/*.py": ({"deploys"}, set()),
    "inventory/*.py": ({"config", "tools"}, set()),
    "inventory/lab.py": ({"config", "tools"}, {"lab.layout", "lab.inventory"}),
    "inventory/lab_scale.py": ({"config", "tools"}, {"lab.layout", "lab.inventory"}),
    "group_data/*.py": ({"config", "agent"}, set()),
    "group_data/lab.py": ({"config", "agent"}, {"lab.layout"}),
    "bench/*.py": (set(ROOMS), {"lab", "tests"}),
}


def scripts() -> dict[Path, tuple[set[str], set[str]]]:
    rules = {}
    for pattern, rule in RULES.items():  # a file's own line comes after its directory's
        rules.update({path: rule for path in sorted(ROOT.glob(pattern))})
    return rules


def imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of every absolute import, at any depth (a lazy one counts)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import in a script"
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def allowed(module: str, rooms: set[str], others: set[str]) -> bool:
    parts = module.split(".")
    if parts[0] == "sglang_pve":
        return len(parts) > 1 and parts[1] in rooms
    return any(module == other or module.startswith(other + ".") for other in others)


def submodule(module: str, name: str) -> bool:
    package = importlib.util.find_spec(module).submodule_search_locations is not None
    return package and importlib.util.find_spec(f"{module}.{name}") is not None


def defines(module: str, name: str) -> bool:
    """Whether `from module import name` finds something: a submodule or a top-level name of its
    source (read, not run: a conftest stays a file)."""
    if submodule(module, name):
        return True
    origin = importlib.util.find_spec(module).origin
    if origin is None:  # a namespace package: nothing but its submodules
        return False
    return name in top_level_names(origin)


def test_every_script_has_a_rule():
    assert {path.relative_to(ROOT).as_posix() for path in scripts()} >= {"deploy.py", "tasks/servers.py"}
    loose = {p for p in ROOT.glob("*/*.py") if p.parent.name in {"tasks", "inventory", "group_data", "bench"}}
    assert loose <= set(scripts())


@pytest.mark.parametrize("path", sorted(scripts()), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_scripts_import_only_their_layers_and_what_exists(path):
    rooms, others = scripts()[path]
    for line, module, name in imports(path):
        where = f"{path.relative_to(ROOT)}:{line}: {module}"
        if module.split(".")[0] not in FIRST_PARTY:
            continue
        assert importlib.util.find_spec(module) is not None, f"{where} does not exist"
        assert name is None or defines(module, name), f"{where} has no {name}"
        target = f"{module}.{name}" if name and submodule(module, name) else module  # from lab import layout
        assert allowed(target, rooms, others), f"{where} is outside its layers: rooms {sorted(rooms)}, {sorted(others)}"


def test_the_rule_refuses_what_it_should():
    tasks = RULES["tasks/*.py"]
    assert not allowed("lab.layout", *tasks) and not allowed("tests.lab.conftest", *tasks)
    assert not allowed("sglang_pve", *tasks) and not allowed("sglang_pve.deploy.paths", *tasks)
    assert allowed("sglang_pve.deploys.status", *tasks)
    assert not allowed("sglang_pve.provision.roles", *RULES["inventory/lab.py"])
    lab_inventory = RULES["inventory/lab.py"]
    assert not allowed("lab.pve.requestlog", *lab_inventory) and allowed("lab.layout", *lab_inventory)
    assert not defines("sglang_pve", "paths") and defines("sglang_pve.deploy", "paths")
    assert submodule("lab", "layout") and not submodule("lab.layout", "INDEX_URL")
    assert defines("sglang_pve.agent.spec", "STALL_PHASES") and not defines("sglang_pve.agent.spec", "STALL")


def test_the_agent_contract_forbids_every_third_party_package_in_use():
    """A new dependency imported anywhere must join the shipped package's forbidden list."""
    graph = grimp.build_graph("sglang_pve", "lab", include_external_packages=True)
    lab_own = {"pve"}  # lab/pve runs as the package `pve` inside its own zipapp (lab/pve/zipapp.py)
    third_party = {m for m in graph.modules if "." not in m} - {"sglang_pve", "lab"} - set(sys.stdlib_module_names)
    assert "pyinfra" in third_party and "pydantic" in third_party
    missing = third_party - lab_own - set(CONTRACTS["agent-stdlib"]["forbidden_modules"])
    assert not missing, f"add {sorted(missing)} to the agent-stdlib contract's forbidden_modules"


def test_the_lab_contract_forbids_every_controller_room():
    assert "agent" in ROOMS and "config" in ROOMS
    forbidden = set(CONTRACTS["lab-no-controller"]["forbidden_modules"])
    assert forbidden == {f"sglang_pve.{room}" for room in ROOMS if room != "agent"}, (
        "list every room of sglang_pve but the shipped one (agent) in the lab-no-controller contract"
    )
    assert CONTRACTS["lab-contract-only"]["forbidden_modules"] == ["sglang_pve.agent"]
