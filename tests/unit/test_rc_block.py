"""The managed block in a user's shell rc: read and edited on the host (sglang_pve/agent/rc_block.py),
run here through the very command the fact and the operation send; the user's other lines never
reach the controller (pyinfra prints fact output at -vvv)."""

import base64
import hashlib
import json
import logging
import os
import pwd
import re
import shlex
import subprocess

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops

from sglang_pve.agent import rc_block
from sglang_pve.config import load_deployment
from sglang_pve.config.nccl import PROFILES
from sglang_pve.deploy.facts.files import RcBlock, rc_block_command
from sglang_pve.deploy.operations import files as file_ops
from sglang_pve.deploy.render import NCCL_BLOCK_LINE, nccl_block
from tests.conftest import PROJECT
from tests.hostile import group_data, in_base64

SECRET = "hf_canarySECRETvalue0123456789"
USER_RC = f"export PATH=$PATH:/opt/bin\nexport HF_TOKEN={SECRET}\n"
BEGIN = rc_block.BEGIN.format(marker="nccl")
END = rc_block.END.format(marker="nccl")


def on_host(command: str) -> subprocess.CompletedProcess:
    """The command as the host's shell runs it (here: this machine, as its user)."""
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)


def read(path, owner=None, shown=NCCL_BLOCK_LINE) -> tuple[str, object]:
    owner = owner or _me()
    result = on_host(RcBlock().command(path=str(path), marker="nccl", owner=owner, shown=shown))
    assert result.returncode == 0, result.stderr
    return result.stdout, RcBlock().process(result.stdout.splitlines())


def write(path, body="export NCCL_PROTO=LL\n", expect=None) -> subprocess.CompletedProcess:
    request = {"action": "write", "path": str(path), "marker": "nccl", "body": body}
    return on_host(rc_block_command(request | {"expect": expect or os.path.realpath(path)}))


def _me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def test_block_is_appended_and_the_rest_is_kept():
    text, old = rc_block.splice(USER_RC.encode(), "nccl", b"export A=1\n")
    assert text.startswith(USER_RC.encode()) and old == b""
    assert text.endswith(f"{BEGIN}\nexport A=1\n{END}\n".encode())


def test_block_is_replaced_in_place():
    first, _ = rc_block.splice(USER_RC.encode(), "nccl", b"export A=1\n")
    edited = first + b"alias ll='ls -l'\n"
    second, old = rc_block.splice(edited, "nccl", b"export A=2\n")
    assert old == b"export A=1\n"
    assert second == edited.replace(b"export A=1\n", b"export A=2\n")
    assert rc_block.splice(second, "nccl", b"export A=2\n")[0] == second  # idempotent


def test_in_base64_finds_a_line_of_a_file_sent_back_base64_encoded():
    for prefix in ("", "a", "ab", "abc"):
        assert in_base64(SECRET, base64.b64encode(f"{prefix}export HF_TOKEN={SECRET}\n".encode()).decode())
    assert not in_base64(SECRET, base64.b64encode(USER_RC.replace(SECRET, "x" * len(SECRET)).encode()).decode())


def test_damaged_block_markers_are_refused():
    text, _ = rc_block.splice(b"", "nccl", b"export A=1\n")
    with pytest.raises(rc_block.Refused, match="markers are damaged"):
        rc_block.splice(text.replace(f"{END}\n".encode(), b""), "nccl", b"export A=2\n")


def test_the_read_sends_back_the_block_s_digest_and_shape_never_the_user_s_lines(tmp_path):
    rc = tmp_path / ".zshrc"
    rc.write_text(USER_RC + f"{BEGIN}\nexport NCCL_PROTO=LL\nexport NCCL_X={SECRET}x;y\n{END}\nalias z=1\n")
    output, found = read(rc)
    assert SECRET not in output and not in_base64(SECRET, output) and "alias" not in output and "PATH" not in output
    assert found.markers == "block" and found.begin == (2,) and found.end == (5,)
    assert found.body == ("export NCCL_PROTO=LL", None)  # a line of another shape: not shown
    assert found.sha1 == hashlib.sha1(f"export NCCL_PROTO=LL\nexport NCCL_X={SECRET}x;y\n".encode()).hexdigest()


def test_a_damaged_block_never_sends_the_lines_after_its_begin(tmp_path):
    """pyinfra's Block fact (awk '/end/{f=0} f; /begin/{f=1}') prints every line after a lone begin."""
    rc = tmp_path / ".zshrc"
    rc.write_text(f"{BEGIN}\nexport NCCL_PROTO=LL\nexport HF_TOKEN={SECRET}\n")
    output, found = read(rc)
    assert SECRET not in output and found.markers == "damaged" and found.begin == (0,) and found.end == ()


def test_a_file_of_someone_else_is_never_read(tmp_path):
    rc = tmp_path / "root-only"
    rc.write_text(f"{BEGIN}\nexport NCCL_PROTO=LL\n{END}\n{SECRET}\n")
    output, found = read(rc, owner="nobody-else")
    assert found.markers is None and found.sha1 is None and "NCCL_PROTO" not in output and SECRET not in output


def test_the_write_keeps_every_other_byte_and_is_idempotent(tmp_path):
    rc = tmp_path / ".zshrc"
    # no final newline, CRs, bytes that are not UTF-8, a marker-like line that is not ours
    original = b"a=1\r\nb=\xff\xfe\n# >>> sglang-pve nccl >>> (not quite)\nexport HF_TOKEN=" + SECRET.encode()
    rc.write_bytes(original)
    os.chmod(rc, 0o640)
    assert write(rc).stdout == "changed\n"
    assert rc.read_bytes() == original + b"\n\n" + f"{BEGIN}\nexport NCCL_PROTO=LL\n{END}\n".encode()
    assert oct(rc.stat().st_mode & 0o777) == "0o640"
    _, found = read(rc)
    assert found.markers == "block" and found.sha1 == hashlib.sha1(b"export NCCL_PROTO=LL\n").hexdigest()
    assert write(rc).stdout == "unchanged\n"  # the host's own check: nothing rewritten
    rc.write_bytes(rc.read_bytes() + b"tail-without-newline")
    assert write(rc, body="export NCCL_PROTO=Simple\n").stdout == "changed\n"
    assert rc.read_bytes() == (
        original + b"\n\n" + f"{BEGIN}\nexport NCCL_PROTO=Simple\n{END}\n".encode() + b"tail-without-newline"
    )
    assert [p.name for p in tmp_path.iterdir()] == [".zshrc"]  # no temporary file left


def test_a_dotfiles_link_is_edited_in_its_target_and_stays_a_link(tmp_path):
    (tmp_path / "dotfiles").mkdir()
    target = tmp_path / "dotfiles" / "zshrc"
    target.write_text("alias ll=ls\n")
    os.chmod(target, 0o600)
    (tmp_path / ".zshrc").symlink_to("dotfiles/zshrc")
    _, found = read(tmp_path / ".zshrc")
    assert found.path == str(target) and found.state.mode == "600" and found.markers == "none"
    assert write(tmp_path / ".zshrc", expect=found.path).returncode == 0
    assert os.readlink(tmp_path / ".zshrc") == "dotfiles/zshrc"
    assert target.read_text().startswith("alias ll=ls\n\n" + BEGIN) and oct(target.stat().st_mode & 0o777) == "0o600"


def test_a_link_changed_since_the_read_or_a_linked_directory_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "rc").write_text("x\n")
    (tmp_path / "rc").symlink_to("real/rc")
    result = write(tmp_path / "rc", expect=str(tmp_path / "elsewhere"))
    assert result.returncode == 1 and "changed meanwhile" in result.stderr
    assert (tmp_path / "real" / "rc").read_text() == "x\n"


def test_a_directory_at_the_path_is_refused(tmp_path):
    (tmp_path / ".zshrc").mkdir()
    _, found = read(tmp_path / ".zshrc")
    assert found.state == file_ops.NOT_A_FILE
    result = write(tmp_path / ".zshrc")
    assert result.returncode == 1 and "not a regular file" in result.stderr


def test_a_missing_file_is_created_644(tmp_path):
    rc = tmp_path / "new" / ".zshrc"
    _, found = read(rc)
    assert found.state is None
    assert write(rc).returncode == 0
    assert rc.read_text() == f"{BEGIN}\nexport NCCL_PROTO=LL\n{END}\n" and oct(rc.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_line_the_nccl_block_writes_is_of_the_shown_shape(tmp_path, profile):
    deployment = load_deployment("sglang1", group_data("all") | {"nccl_profile": profile}, PROJECT)
    assert all(re.fullmatch(NCCL_BLOCK_LINE, line) for line in nccl_block(deployment).splitlines())


# The operation on pyinfra's @fake connector: the fact answered as the host's script would.


def block_run(found: dict, user: str = "dev", diff: bool = False, caplog=None) -> list[str]:
    inventory = Inventory(
        (["@fake/t"], {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": {'"read"': [json.dumps(found)]}})
    )
    state = State(inventory=inventory, config=Config(DIFF=diff))
    state.cwd = str(PROJECT)
    connect_all(state)
    add_op(
        state,
        file_ops.block,
        path="/home/dev/.zshrc",
        marker="nccl",
        body="export NCCL_A=1\n",
        user=user,
        shown=NCCL_BLOCK_LINE,
    )
    run_ops(state)
    return [c for c in inventory.get_host("@fake/t").connector.executed_commands if '"read"' not in c]


def dev_file(path="/home/dev/.zshrc", **more) -> dict:
    return {"path": path, "state": "file", "mode": "600", "user": "dev", "group": "dev"} | more


def test_a_dotfiles_link_is_edited_by_the_user_in_its_target():
    [command] = block_run(dev_file("/home/dev/dotfiles/zshrc", markers="none", begin=[], end=[]))
    assert command.startswith("runuser -u dev -- /usr/bin/python3 -I -c")
    request = json.loads(shlex.split(command)[-1])
    assert request == {
        "action": "write",
        "path": "/home/dev/.zshrc",
        "marker": "nccl",
        "body": "export NCCL_A=1\n",
        "expect": "/home/dev/dotfiles/zshrc",
    }


def test_a_link_towards_someone_else_s_file_is_refused():
    with pytest.raises(Exception, match="belongs to root, not dev"):
        block_run({"path": "/etc/shadow", "state": "file", "mode": "640", "user": "root", "group": "shadow"})


def test_a_directory_at_the_rc_is_refused():
    with pytest.raises(Exception, match="not a regular file"):
        block_run({"path": "/home/dev/.zshrc", "state": "not_a_file"})


def test_damaged_markers_are_refused_before_any_write():
    with pytest.raises(Exception, match=r"markers are damaged \(begin lines \[3\], end lines \[\]\)"):
        block_run(dev_file(markers="damaged", begin=[3], end=[]))


def test_diff_shows_the_block_s_change_and_no_line_of_another_shape(caplog):
    old = dev_file(markers="block", begin=[0], end=[3], sha1="0" * 40, body=["export NCCL_A=2", None])
    with caplog.at_level(logging.INFO):
        block_run(old, diff=True)
    shown = caplog.text
    assert "Will modify the nccl block in /home/dev/.zshrc" in shown
    assert "export NCCL_A=2" in shown and "export NCCL_A=1" in shown
    assert "(a line not written by sglang-pve: not shown)" in shown
