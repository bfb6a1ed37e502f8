"""pyinfra-style cases for the operations and facts: one JSON file per behaviour, in the layout of
pyinfra's own tests (https://github.com/pyinfra-dev/pyinfra/tree/3.x/tests/operations/files.block,
https://github.com/pyinfra-dev/pyinfra/tree/3.x/tests/facts/systemd.SystemdStatus; the runner follows
https://github.com/pyinfra-dev/pyinfra/blob/3.x/tests/test_operations.py):

    tests/operations/<module>.<operation>/<case>.json
        {"args": [...], "kwargs": {...},
         "facts": {"<module>.<Fact>": {"<arg>=<value>, ..." | "*": <the fact command's output lines>}},
         "commands": [...exact commands...], "noop_description": "...", "warnings": ["...substring..."],
         "exception": {"name": "OperationError", "message": "...exact..."},
         "executing": false}  (optional: the prepare-time pass, under --dry; default: executing)
    tests/facts/<module>.<Fact>/<case>.json
        {"arg": {...}, "command": "...exact shell...", "output": [...lines...], "fact": <processed, as JSON>}

Facts are given as what their command prints, so every operation case also runs the fact's
`process`. Arguments that are objects are written {"path": ..., "content": ...} (a ManagedFile),
{"<Class>": {fields}} for the dataclasses in ARGUMENT_TYPES (lists become tuples where the field is
a tuple) or {"function": "module.name"}. In commands: an upload is ["upload", destination, sha1 of
the content], a callback [function name, args, kwargs] (as pyinfra's own cases), random staging
names are written <random>, a base64 argument that holds JSON is written base64:<the JSON, keys
sorted>, the preflight probe shipped inline is <preflight_probe.py> (agent/rc_block.py: <rc_block.py>),
and the controller's user@host (provenance.who) is <who>. In facts, bytes are written {"bytes": text}.

Every operation and fact of the package has cases here, except the ones in ELSEWHERE: operations
whose work is a callback against the Proxmox API (tested on the in-process emulator).
"""

import base64
import binascii
import dataclasses
import importlib
import json
import pkgutil
import re
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import FactBase, FileUploadCommand, FunctionCommand, OperationError, StringCommand
from pyinfra.context import ctx_host, ctx_state

import sglang_pve
from sglang_pve.agent.gpus import DeviceNode
from sglang_pve.config.indexes import IndexLogin
from sglang_pve.config.secrets import Secret
from sglang_pve.deploy.facts import files as file_facts
from sglang_pve.deploy.facts import gpu as gpu_facts
from sglang_pve.deploy.facts import host_basics
from sglang_pve.deploy.facts import lock as lock_facts
from sglang_pve.deploy.facts import node_exporter as node_exporter_facts
from sglang_pve.deploy.facts import preflight as preflight_facts
from sglang_pve.deploy.facts import python as python_facts
from sglang_pve.deploy.facts import releases as release_facts
from sglang_pve.deploy.facts import router as router_facts
from sglang_pve.deploy.facts import server_status as status_facts
from sglang_pve.deploy.facts import servers as server_facts
from sglang_pve.deploy.facts import unit_host as unit_host_facts
from sglang_pve.deploy.facts import units as unit_facts
from sglang_pve.deploy.facts import venvs as venv_facts
from sglang_pve.deploy.facts import zfs as zfs_facts
from sglang_pve.deploy.operations import files, lock, node_exporter, releases, router, units, venvs
from sglang_pve.deploy.operations.files import ManagedFile
from sglang_pve.deploy.provenance import who
from sglang_pve.provision import device_nodes, guest_deploy, node_facts, raw_lines, restart_debt

CASES = Path(__file__).resolve().parent.parent
_RANDOM = re.compile(r"/[0-9a-f]{24}\b")
_BASE64 = re.compile(r"(?<![\w+/=])[A-Za-z0-9+/]{24,}={0,2}(?![\w+/=])")
OPERATIONS = {
    "files.file_set": files.file_set,
    "files.block": files.block,
    "releases.release": releases.release,
    "releases.switched": releases.switched,
    "releases.rolled_back": releases.rolled_back,
    "venvs.venv": venvs.venv,
    "router.router_unit": router.router_unit,
    "router.router_workers": router.router_workers,
    "lock.held": lock.held,
    "lock.released": lock.released,
    "node_exporter.exporter": node_exporter.exporter,
    "guest_deploy.nodes_done": guest_deploy.nodes_done,
    "guest_deploy.deploy_when_provisioned": guest_deploy.deploy_when_provisioned,
    "device_nodes.present": device_nodes.present,
    "units.running": units.running,
}
FACTS = {
    f"{module.__name__.rsplit('.', 1)[-1]}.{name}": getattr(module, name)
    for module, names in (
        (file_facts, ("FileDigests", "FileText", "RcBlock", "FilesAndBlock")),
        (server_facts, ("ServerUnits",)),
        (python_facts, ("VenvSitePackages",)),
        (venv_facts, ("SglangVenv", "VenvParents")),
        (release_facts, ("Releases", "UnitsAndReleases")),
        (status_facts, ("ServerStatus",)),
        (router_facts, ("RouterStatus", "RouterUnit", "RouterLeft")),
        (gpu_facts, ("GpuDevices", "UserSpaceDriver")),
        (lock_facts, ("DeployLock", "DeployUnlock", "DeployLockHolder", "LockCount")),
        (node_exporter_facts, ("NodeExporter",)),
        (preflight_facts, ("PreflightProbe", "PreflightRead")),
        (zfs_facts, ("ZfsSnapshots",)),
        (restart_debt, ("RestartDebts",)),
        (raw_lines, ("RawLxcLines",)),
        (unit_host_facts, ("UnitHostInfo",)),
        (unit_facts, ("UnitStates",)),
        (node_facts, ("NodeFacts",)),
        (host_basics, ("HostBasics",)),
    )
    for name in names
}
# Covered elsewhere, and why.
ELSEWHERE = {
    "container.container": "tests/unit/test_proxmox_provision.py (a Proxmox API callback, on the emulator)",
    "container.containers": "tests/unit/test_proxmox_fleet.py (a node's containers together: Proxmox API callbacks, on "
    "the emulator)",
    "snapshot_rollback.rolled_back": "tests/unit/test_proxmox_provision.py, test_snapshot_rollback.py (a Proxmox "
    "API callback; its ZfsSnapshots fact has cases here)",
    "fleet_restart.restart_owed": "tests/unit/test_fleet_restart.py (a fleet member's restart through its node's "
    "API, in its set's turn or with its group: callbacks across hosts), tests/lab/scale/test_fleet_restart_lab.py",
}
ARGUMENT_TYPES = {
    cls.__name__: cls
    for cls in (
        releases.Release,
        files.ManagedBlock,
        venvs.Source,
        IndexLogin,
        Secret,
        preflight_facts.ProbeSpec,
        preflight_facts.RenderedConfig,
        gpu_facts.GpuDeviceInfo,
        DeviceNode,
    )
}


def cases(kind: str) -> list:
    return [
        pytest.param(path.parent.name, path, id=f"{path.parent.name}/{path.stem}")
        for path in sorted((CASES / kind).glob("*/*.json"))
    ]


def argument_key(kwargs: dict) -> str:
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(kwargs.items()))


class FakeHost:
    name = "case"
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


def arguments(value):
    """Case JSON -> the objects an operation or fact is called with (see the module docstring)."""
    if isinstance(value, dict) and set(value) >= {"path", "content"}:
        return ManagedFile(**value)
    if isinstance(value, dict) and set(value) == {"function"}:
        module, _, name = value["function"].rpartition(".")
        return getattr(importlib.import_module(module), name)
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ARGUMENT_TYPES:
        [(name, fields)] = value.items()
        cls = ARGUMENT_TYPES[name]
        hints = typing.get_type_hints(cls)
        built = {
            k: tuple(arguments(v)) if typing.get_origin(hints[k]) is tuple else arguments(v) for k, v in fields.items()
        }
        return cls(**built)
    if isinstance(value, dict):
        return {k: arguments(v) for k, v in value.items()}
    if isinstance(value, list):
        return [arguments(v) for v in value]
    return value


def _readable(text: str) -> str:
    text = _RANDOM.sub("/<random>", text)
    text = _BASE64.sub(_decoded, text)
    return text.replace(who(), "<who>")


def _decoded(match: re.Match) -> str:
    try:
        data = base64.b64decode(match.group(0), validate=True)
    except (binascii.Error, ValueError):
        return match.group(0)
    if data == preflight_facts.PROBE.read_bytes():
        return "<preflight_probe.py>"
    if data == file_facts.RC_BLOCK.read_bytes():
        return "<rc_block.py>"
    try:
        document = json.loads(data)
    except ValueError:
        return match.group(0)
    return "base64:" + json.dumps(document, sort_keys=True) if isinstance(document, dict) else match.group(0)


def as_json(command):
    if isinstance(command, FileUploadCommand):
        data = command.src.getvalue()
        return ["upload", _RANDOM.sub("/<random>", command.dest), ManagedFile("", data).sha1]
    if isinstance(command, FunctionCommand):
        return [command.function.__name__, plain(list(command.args)), plain(command.kwargs)]
    assert isinstance(command, StringCommand), command
    return _readable(command.get_raw_value())


@pytest.mark.parametrize("name, path", cases("operations"))
def test_operation_case(name, path, caplog):
    caplog.set_level("INFO", logger="pyinfra")
    case = json.loads(path.read_text())
    fake = FakeHost(case.get("facts", {}))
    executing = case.get("executing", True)  # a run under -y: the generator runs once, when executing
    diff = SimpleNamespace(
        config=SimpleNamespace(DIFF=False), is_executing=executing, should_check_for_changes=lambda: not executing
    )
    call = OPERATIONS[name]._inner(*arguments(case.get("args", [])), **arguments(case.get("kwargs", {})))
    with ctx_host.use(fake), ctx_state.use(diff):
        if "exception" in case:
            with pytest.raises(OperationError) as raised:
                list(call)
            expected = case["exception"]
            assert (type(raised.value).__name__, str(raised.value)) == (expected["name"], expected["message"])
            return
        commands = [as_json(c) for c in call]
    assert commands == case["commands"]
    assert fake.noops == ([case["noop_description"]] if "noop_description" in case else [])
    for warning in case.get("warnings", []):
        assert warning in caplog.text
    for said in case.get("said", []):  # logged without -v (INFO)
        assert said in caplog.text
    if not case.get("warnings"):
        assert "WARNING" not in caplog.text


def plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):  # keys as JSON writes them ({129: ...} is {"129": ...})
        return {str(k) if isinstance(k, int) else k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return {"bytes": value.decode("utf-8", "backslashreplace")}
    if callable(value):
        return {"function": f"{value.__module__}.{value.__qualname__}"}
    return value


@pytest.mark.parametrize("name, path", cases("facts"))
def test_fact_case(name, path):
    case = json.loads(path.read_text())
    fact = FACTS[name]()
    assert _readable(fact.command(**arguments(case.get("arg", {})))) == case["command"]
    assert plain(fact.process(case["output"])) == case["fact"]


def _package_modules():
    for info in pkgutil.walk_packages(sglang_pve.__path__, "sglang_pve."):
        if not info.name.endswith(".__main__"):  # running it is its only purpose
            yield importlib.import_module(info.name)


def test_every_operation_and_fact_of_the_package_has_cases():
    """A new @operation or FactBase without cases fails here (ELSEWHERE says where the others are)."""
    found = set()
    for module in _package_modules():
        short = module.__name__.rsplit(".", 1)[-1]
        for name, value in vars(module).items():
            if getattr(value, "__module__", None) != module.__name__:
                continue
            operation = hasattr(getattr(value, "_inner", None), "is_idempotent")  # not a @deploy (test_deploys.py)
            if operation or (isinstance(value, type) and issubclass(value, FactBase)):
                found.add(f"{short}.{name}")
    assert found == set(OPERATIONS) | set(FACTS) | set(ELSEWHERE)
    for name in OPERATIONS:
        assert list((CASES / "operations" / name).glob("*.json")), f"no cases for the operation {name}"
    for name in FACTS:
        assert list((CASES / "facts" / name).glob("*.json")), f"no cases for the fact {name}"
