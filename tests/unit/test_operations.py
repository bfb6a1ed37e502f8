"""Operation decisions against canned facts (pyinfra's @fake connector): which commands a state yields."""

import base64
import re

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops

from sglang_pve.deploy.facts.servers import parse_show
from sglang_pve.deploy.operations import files as file_ops
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
    lines = []
    for f in [f for fs in files().values() for f in fs]:
        content = on_host.get(f.path)
        lines.append(
            f"{f.path}\t-" if content is None else f"{f.path}\t644\troot\troot\t{ManagedFile(f.path, content).sha1}"
        )
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


def servers_run(on_host, units, installed=None):
    return run(systemd.server_units, {"--- units": fact_output(on_host, units, installed)}, files=files())


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
    commands = "\n".join(run(systemd.server_units, {"--- units": lines}, files=files()))
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


USER_RC = "export PATH=$PATH:/opt/bin\nexport HF_TOKEN=secret\n"


def test_block_is_appended_and_the_rest_is_kept():
    text, old = file_ops.splice(USER_RC, "nccl", "export A=1\n")
    assert text.startswith(USER_RC) and old == ""
    assert text.endswith(
        "# >>> sglang-pve nccl >>> (managed block: rewritten on every deploy)\nexport A=1\n# <<< sglang-pve nccl <<<\n"
    )


def test_block_is_replaced_in_place():
    first, _ = file_ops.splice(USER_RC, "nccl", "export A=1\n")
    edited = first + "alias ll='ls -l'\n"
    second, old = file_ops.splice(edited, "nccl", "export A=2\n")
    assert old == "export A=1\n"
    assert second == edited.replace("export A=1\n", "export A=2\n")
    assert file_ops.splice(second, "nccl", "export A=2\n")[0] == second  # idempotent


def rc_fact(path: str, owner: str, text: str | None = "alias ll='ls -l'\n") -> list[str]:
    """What FileText prints for a (resolved) rc owned by `owner`, its text only when owned by the user asked for."""
    lines = [path, f"600\t{owner}\t{owner}", "sha1"]
    return lines + ([f"text:{base64.b64encode(text.encode()).decode()}"] if text is not None else [])


def block_run(fact_lines: list[str], user: str = "dev"):
    return run(
        file_ops.block,
        {"readlink -m": fact_lines},
        path="/home/dev/.zshrc",
        marker="nccl",
        body="export A=1\n",
        user=user,
    )


def test_a_dotfiles_link_is_edited_in_its_target_as_the_user_with_its_mode():
    commands = "\n".join(block_run(rc_fact("/home/dev/dotfiles/zshrc", "dev")))
    assert "runuser -u dev -- sh -c" in commands and "sh /home/dev/dotfiles/zshrc <" in commands
    assert "chmod 600" in commands and "t=/home/dev/.zshrc" not in commands


def test_a_link_towards_someone_elses_file_is_refused_and_never_read():
    with pytest.raises(Exception, match="belongs to root, not dev"):
        block_run(rc_fact("/etc/shadow", "root", text=None))


def test_a_directory_at_the_rc_is_refused():
    with pytest.raises(Exception, match="not a regular file"):
        block_run(["/home/dev/.zshrc", "!"])


def test_damaged_block_markers_are_refused():
    text, _ = file_ops.splice("", "nccl", "export A=1\n")
    damaged = text.replace("# <<< sglang-pve nccl <<<\n", "")
    with pytest.raises(Exception, match="markers are damaged"):
        file_ops.splice(damaged, "nccl", "export A=2\n")
