"""Operation decisions against canned facts (pyinfra's @fake connector): which commands a state yields."""

import re
from types import SimpleNamespace

from pyinfra.api import Config, FileUploadCommand, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.context import ctx_host, ctx_state

from sglang_pve.deploy.facts.servers import ServerUnits, parse_show
from sglang_pve.deploy.operations import systemd
from sglang_pve.deploy.operations.files import ManagedFile
from tests.conftest import PROJECT

UNIT = "/etc/systemd/system/sglang-a.service"
YAML = "/etc/sglang/servers/a.yaml"


def files(unit="unit-a", yaml="yaml-a"):
    return {
        "a": [ManagedFile(UNIT, unit), ManagedFile(YAML, yaml)],
        "b": [ManagedFile("/etc/systemd/system/sglang-b.service", "unit-b")],
    }


def fact_output(on_host: dict[str, str], units: dict[str, tuple[str, str]], installed=None):
    """What the ServerUnits command prints for files with the given contents and units in the given states."""
    lines, sums = [], []  # facts/files.py digest_script: the missing files, the stat lines, then sha1sum's
    for f in [f for fs in files().values() for f in fs]:
        content = on_host.get(f.path)
        if content is None:
            lines.insert(0, f"{f.path}\t-")
        else:
            lines.append(f"{f.path}\t644\troot\troot")
            sums.append(f"{ManagedFile(f.path, content).sha1}  {f.path}")
    lines += sums
    lines.append("--- units")
    lines += [f"ours {u}" for u in (installed if installed is not None else units)]
    lines.append("--- log dir")
    lines.append("--- show")
    for unit, (active, enabled) in units.items():
        lines += [
            f"Id={unit}",
            "LoadState=loaded",
            f"ActiveState={active}",
            "SubState=x",
            f"UnitFileState={enabled}",
            "Result=success",
            "",
        ]
    return lines


def run(operation, responses: dict, fact_markers: tuple = ("--- units", "base64"), **kwargs) -> list[str]:
    """The commands `operation` yields on a fake host answering facts from `responses` (fact
    commands, recognised by `fact_markers`, left out)."""
    inventory = Inventory((["@fake/t"], {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}))
    state = State(inventory=inventory, config=Config())
    state.cwd = str(PROJECT)
    connect_all(state)
    add_op(state, operation, **kwargs)
    run_ops(state)
    host = inventory.get_host("@fake/t")
    return [c for c in host.connector.executed_commands if not any(marker in c for marker in fact_markers)]


IN_SYNC = {UNIT: "unit-a", YAML: "yaml-a", "/etc/systemd/system/sglang-b.service": "unit-b"}
RUNNING = {"sglang-a.service": ("active", "enabled"), "sglang-b.service": ("inactive", "disabled")}


def unit_run(lines: list[str]) -> list[str]:
    """The server units' commands (systemd.unit_commands, which the release operation runs first)
    for the ServerUnits fact that prints `lines`; an upload as `upload DEST`."""
    fake = SimpleNamespace(print_prefix="[t] ", name="t")
    with ctx_host.use(fake), ctx_state.use(SimpleNamespace(config=SimpleNamespace(DIFF=False))):
        commands = systemd.unit_commands(files(), ServerUnits().process(lines))
    return [f"upload {c.dest}" if isinstance(c, FileUploadCommand) else c.get_raw_value() for c in commands]


def servers_run(on_host, units, installed=None):
    return unit_run(fact_output(on_host, units, installed))


def test_nothing_to_do_when_files_match():
    assert servers_run(IN_SYNC, RUNNING) == []


def test_changed_files_are_written_but_nothing_is_stopped_or_started():
    commands = servers_run(IN_SYNC | {YAML: "old"}, RUNNING)  # the switch (releases.py) restarts later
    assert any(YAML in c for c in commands)
    assert not any(re.search(r"systemctl (start|stop|restart|enable|disable) ", c) for c in commands)
    assert not any("daemon-reload" in c for c in commands)  # no unit file changed


def test_unit_file_change_reloads_systemd():
    commands = servers_run(IN_SYNC | {"/etc/systemd/system/sglang-b.service": "old"}, RUNNING)
    assert any("systemctl daemon-reload" in c for c in commands)
    assert not any("restart" in c for c in commands)


def test_undeclared_unit_is_removed():
    commands = servers_run(IN_SYNC, RUNNING, installed=["sglang-a.service", "sglang-b.service", "sglang-old.service"])
    joined = "\n".join(commands)
    assert "systemctl disable --now sglang-old.service" in joined
    assert "/etc/sglang/servers/old.yaml" in joined and "daemon-reload" in joined


def test_first_install_uploads_atomically_then_reloads():
    commands = servers_run({}, {})
    joined = "\n".join(commands)
    assert "t=/etc/systemd/system/sglang-a.service;" in joined and 'mv -f -T -- "$tmp" "$t"' in joined
    assert "daemon-reload" in joined and "systemctl start" not in joined  # the switch (releases.py) starts it


def test_writes_use_no_predictable_name_and_never_follow_links():
    first, second = ("\n".join(servers_run({}, {})) for _ in range(2))
    staged = re.findall(r"s=(/var/lib/sglang-pve/staging/[0-9a-f]+);", first)
    assert len(staged) == 3 and not set(staged) & set(re.findall(r"s=(\S+);", second))  # random per write
    assert "sglang-pve-new" not in first and first.count("mktemp --") == 3  # temp files created exclusively
    assert "chown -h root:root" in first and "chown root" not in first  # ownership never dereferences


def test_a_link_at_a_managed_path_is_replaced_not_followed():
    lines = fact_output(IN_SYNC, RUNNING)
    lines[0] = f"{UNIT}\t!"  # the fact saw a link (or a directory) where the unit should be
    commands = "\n".join(unit_run(lines))
    assert f"t={UNIT};" in commands


def test_parse_show_skips_units_that_are_not_loaded():
    states = parse_show(
        [
            "Id=a.service",
            "LoadState=loaded",
            "ActiveState=failed",
            "UnitFileState=enabled",
            "Id=b.service",
            "LoadState=not-found",
            "ActiveState=inactive",
        ]
    )
    assert list(states) == ["a.service"] and states["a.service"].active == "failed"
