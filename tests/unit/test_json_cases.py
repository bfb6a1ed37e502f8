"""pyinfra-style cases for the custom operations and facts: one JSON file per behaviour, in the
layout of pyinfra's own tests (https://github.com/pyinfra-dev/pyinfra/tree/3.x/tests/operations/files.block,
https://github.com/pyinfra-dev/pyinfra/tree/3.x/tests/facts/systemd.SystemdStatus):

    tests/operations/<module>.<operation>/<case>.json
        {"kwargs": {...}, "facts": {"<module>.<Fact>": {"<arg>=<value>" | "*": <the fact command's output lines>}},
         "commands": [...exact commands...], "noop_description": "...", "warnings": ["...substring..."]}
    tests/facts/<module>.<Fact>/<case>.json
        {"arg": {...}, "command": "...exact shell...", "output": [...lines...], "fact": <processed, as JSON>}

Facts are given as what their command prints, so every operation case also runs the fact's
`process`. ManagedFile arguments are written {"path": ..., "content": ...}; an upload is
["upload", destination, sha1 of the content]; random staging names are written <random>.
"""

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import FileUploadCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state

from sglang_pve.deploy.facts import files as file_facts
from sglang_pve.deploy.facts import python as python_facts
from sglang_pve.deploy.facts import servers as server_facts
from sglang_pve.deploy.operations import files, systemd
from sglang_pve.deploy.operations.files import ManagedFile

CASES = Path(__file__).resolve().parent.parent
_RANDOM = re.compile(r"/[0-9a-f]{24}\b")
OPERATIONS = {
    "files.file_set": files.file_set,
    "files.block": files.block,
    "systemd.server_units": systemd.server_units,
}
FACTS = {
    f"{module.__name__.rsplit('.', 1)[-1]}.{name}": getattr(module, name)
    for module, names in (
        (file_facts, ("FileDigests", "FileText")),
        (server_facts, ("ServerUnits",)),
        (python_facts, ("VenvSitePackages",)),
    )
    for name in names
}


def cases(kind: str) -> list:
    return [
        pytest.param(path.parent.name, path, id=f"{path.parent.name}/{path.stem}")
        for path in sorted((CASES / kind).glob("*/*.json"))
    ]


def argument_key(kwargs: dict) -> str:
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(kwargs.items()))


class FakeHost:
    print_prefix = "[case] "

    def __init__(self, facts: dict):
        self.facts, self.noops, self.logged = facts, [], []

    def get_fact(self, fact, **kwargs):
        name = f"{fact.__module__.rsplit('.', 1)[-1]}.{fact.__name__}"
        table = self.facts[name]
        output = table.get(argument_key(kwargs), table.get("*"))
        assert output is not None, f"the case gives no {name} for {argument_key(kwargs)}"
        return fact().process(output)

    def noop(self, description):
        self.noops.append(description)

    def log(self, message, *args, **kwargs):
        self.logged.append(message)


def managed_files(value):
    if isinstance(value, dict) and set(value) >= {"path", "content"}:
        return ManagedFile(**value)
    if isinstance(value, dict):
        return {k: managed_files(v) for k, v in value.items()}
    if isinstance(value, list):
        return [managed_files(v) for v in value]
    return value


def as_json(command):
    """Random staging names (deploy/operations/files.py) are written <random> in the cases."""
    if isinstance(command, FileUploadCommand):
        data = command.src.getvalue()
        return ["upload", _RANDOM.sub("/<random>", command.dest), ManagedFile("", data).sha1]
    assert isinstance(command, StringCommand), command
    return _RANDOM.sub("/<random>", command.get_raw_value())


@pytest.mark.parametrize("name, path", cases("operations"))
def test_operation_case(name, path, caplog):
    case = json.loads(path.read_text())
    fake = FakeHost(case.get("facts", {}))
    with ctx_host.use(fake), ctx_state.use(SimpleNamespace(config=SimpleNamespace(DIFF=False))):
        commands = [as_json(c) for c in OPERATIONS[name]._inner(**managed_files(case["kwargs"]))]
    assert commands == case["commands"]
    assert fake.noops == ([case["noop_description"]] if "noop_description" in case else [])
    for warning in case.get("warnings", []):
        assert warning in caplog.text
    if not case.get("warnings"):
        assert "WARNING" not in caplog.text


def plain(value):
    if dataclasses.is_dataclass(value):
        return {k: plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("name, path", cases("facts"))
def test_fact_case(name, path):
    case = json.loads(path.read_text())
    fact = FACTS[name]()
    assert fact.command(**case["arg"]) == case["command"]
    assert plain(fact.process(case["output"])) == case["fact"]
