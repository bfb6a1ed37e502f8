"""Operation decisions against canned facts (pyinfra's @fake connector): which commands a state yields."""

import re

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops

from sglang_pve.facts.servers import parse_show
from sglang_pve.operations import files as file_ops
from sglang_pve.operations import systemd
from sglang_pve.operations.files import ManagedFile
from tests.conftest import PROJECT

UNIT = "/etc/systemd/system/sglang-a.service"
YAML = "/etc/sglang/servers/a.yaml"


def files(unit="unit-a", yaml="yaml-a"):
    return {"a": [ManagedFile(UNIT, unit), ManagedFile(YAML, yaml)],
            "b": [ManagedFile("/etc/systemd/system/sglang-b.service", "unit-b")]}


def fact_output(on_host: dict[str, str], units: dict[str, tuple[str, str]], installed=None):
    """What the ServerUnits command prints for files with the given contents and units in the given states."""
    lines = []
    for f in [f for fs in files().values() for f in fs]:
        content = on_host.get(f.path)
        lines.append(f"{f.path}\t-" if content is None else f"{f.path}\t644\troot\troot\t{ManagedFile(f.path, content).sha1}")
    lines.append("--- units")
    lines += installed if installed is not None else [u for u in units]
    lines.append("--- log dir")
    lines.append("--- show")
    for unit, (active, enabled) in units.items():
        lines += [f"Id={unit}", "LoadState=loaded", f"ActiveState={active}", "SubState=x", f"UnitFileState={enabled}", "Result=success", ""]
    return lines


def run(operation, responses: dict, **kwargs) -> list[str]:
    inventory = Inventory((["@fake/t"], {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}))
    state = State(inventory=inventory, config=Config())
    state.cwd = str(PROJECT)
    connect_all(state)
    add_op(state, operation, **kwargs)
    run_ops(state)
    host = inventory.get_host("@fake/t")
    fact_commands = [c for c in host.connector.executed_commands if "--- units" in c or "base64" in c]
    return [c for c in host.connector.executed_commands if c not in fact_commands]


IN_SYNC = {UNIT: "unit-a", YAML: "yaml-a", "/etc/systemd/system/sglang-b.service": "unit-b"}
RUNNING = {"sglang-a.service": ("active", "enabled"), "sglang-b.service": ("inactive", "disabled")}


def servers_run(on_host, units, active="a", installed=None):
    return run(systemd.server_units, {"--- units": fact_output(on_host, units, installed)}, files=files(), active=active)


def test_nothing_to_do_when_files_match_and_active_runs():
    assert servers_run(IN_SYNC, RUNNING) == []


def test_active_restarts_only_when_its_own_files_changed():
    commands = servers_run(IN_SYNC | {YAML: "old"}, RUNNING)
    assert any("systemctl restart sglang-a.service" in c for c in commands)
    assert not any("daemon-reload" in c for c in commands)  # no unit file changed


def test_other_server_file_change_reloads_but_does_not_restart_active():
    commands = servers_run(IN_SYNC | {"/etc/systemd/system/sglang-b.service": "old"}, RUNNING)
    assert any("systemctl daemon-reload" in c for c in commands)
    assert not any("restart" in c for c in commands)


def test_switching_active_stops_the_other_and_starts_the_new_one():
    commands = servers_run(IN_SYNC, {"sglang-a.service": ("inactive", "disabled"), "sglang-b.service": ("active", "enabled")})
    joined = "\n".join(commands)
    assert "systemctl stop sglang-b.service" in joined and "systemctl disable sglang-b.service" in joined
    assert joined.index("stop sglang-b") < joined.index("start sglang-a")
    assert "systemctl enable sglang-a.service" in joined


def test_undeclared_unit_is_removed():
    commands = servers_run(IN_SYNC, RUNNING, installed=["sglang-a.service", "sglang-b.service", "sglang-old.service"])
    joined = "\n".join(commands)
    assert "systemctl disable --now sglang-old.service" in joined
    assert "/etc/sglang/servers/old.yaml" in joined and "daemon-reload" in joined


def test_first_install_uploads_atomically_then_reloads_and_starts():
    commands = servers_run({}, {})
    joined = "\n".join(commands)
    assert re.search(r"mv -f /etc/systemd/system/sglang-a.service.sglang-pve-new /etc/systemd/system/sglang-a.service", joined)
    assert joined.index("daemon-reload") < joined.index("systemctl start sglang-a.service")


def test_parse_show_skips_units_that_are_not_loaded():
    states = parse_show(["Id=a.service", "LoadState=loaded", "ActiveState=failed", "UnitFileState=enabled",
                         "Id=b.service", "LoadState=not-found", "ActiveState=inactive"])
    assert list(states) == ["a.service"] and states["a.service"].active == "failed"


USER_RC = "export PATH=$PATH:/opt/bin\nexport HF_TOKEN=secret\n"


def test_block_is_appended_and_the_rest_is_kept():
    text, old = file_ops.splice(USER_RC, "nccl", "export A=1\n")
    assert text.startswith(USER_RC) and old == ""
    assert text.endswith("# >>> sglang-pve nccl >>> (managed block: rewritten on every deploy)\nexport A=1\n# <<< sglang-pve nccl <<<\n")


def test_block_is_replaced_in_place():
    first, _ = file_ops.splice(USER_RC, "nccl", "export A=1\n")
    edited = first + "alias ll='ls -l'\n"
    second, old = file_ops.splice(edited, "nccl", "export A=2\n")
    assert old == "export A=1\n"
    assert second == edited.replace("export A=1\n", "export A=2\n")
    assert file_ops.splice(second, "nccl", "export A=2\n")[0] == second  # idempotent


def test_damaged_block_markers_are_refused():
    text, _ = file_ops.splice("", "nccl", "export A=1\n")
    damaged = text.replace("# <<< sglang-pve nccl <<<\n", "")
    with pytest.raises(Exception, match="markers are damaged"):
        file_ops.splice(damaged, "nccl", "export A=2\n")
