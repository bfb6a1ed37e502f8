"""prestart never starts a mix of two releases (agent/mixed.py): the files a unit reads must be the
current release's or the pending switch's; another configuration's own files do not count."""

import hashlib

import pytest

from sglang_pve.agent import cli, contract, exitcodes, mixed, state
from sglang_pve.agent.release_store import Store
from tests.unit.agent_support import rendered, write_spec

pytestmark = pytest.mark.usefixtures("agent_env")  # SGLANG_PVE_RELEASES_DIR: tmp_path/releases


def _record(tmp_path, store: Store, text: str) -> dict:
    shared = tmp_path / "etc" / "nccl.env"
    shared.parent.mkdir(exist_ok=True)
    shared.write_text(text)
    lock = tmp_path / "v.lock"
    lock.write_text("sglang==1.0\n")
    spec = {
        "sglang_version": "1.0",
        "venv": str(tmp_path / "v"),
        "lock": str(lock),
        "active_server": "a",
        "lifecycle": None,
        "units": ["sglang-a.service", "sglang-b.service"],
        "nccl_profile": text.strip(),
        "files": rendered(shared),
    }
    record = store.record(spec)
    # b's own unit, which a never reads (written by hand: the test cannot write /etc/systemd/system)
    record["files"][contract.unit_path("b")] = {"sha256": hashlib.sha256(b"b").hexdigest(), "mode": "644"}
    store.save(record)
    return record


def test_a_unit_starts_only_from_the_current_or_the_pending_releases_files(tmp_path):
    spec = write_spec(tmp_path, server="a")
    store = Store(str(tmp_path / "releases"))
    assert mixed.why_not(spec) is None  # no release knows the unit: not checked (the GPU tests)
    first = _record(tmp_path, store, "p1\n")
    store.set_current(first["id"])
    assert mixed.why_not(spec) is None  # b's unit is missing here, and a does not read it
    assert mixed.why_not(write_spec(tmp_path, server="c")) is None  # a unit of no release

    second = _record(tmp_path, store, "p2\n")  # a deploy wrote the next release's files...
    refusal = mixed.why_not(spec)  # ...and a reboot came before its switch: the old unit, new files
    assert refusal is not None and refusal.startswith("refusing to start sglang-a.service: the files it reads")
    assert f"release {first['id']}: {tmp_path / 'etc' / 'nccl.env'} differ" in refusal and "rollback" in refusal
    assert mixed.why_not(write_spec(tmp_path, server="b")) is not None  # b reads its own unit too

    store.set_pending(second["id"])  # the switch to it: its files are all in place
    assert mixed.why_not(spec) is None
    store.set_pending(None)
    (tmp_path / "etc" / "nccl.env").write_text("p1\n")  # the old release's files again (a revert)
    assert mixed.why_not(spec) is None


def test_prestart_refuses_a_mix_before_anything_else(tmp_path, capsys):
    spec = write_spec(tmp_path, server="a")
    store = Store(str(tmp_path / "releases"))
    store.set_current(_record(tmp_path, store, "p1\n")["id"])
    (tmp_path / "etc" / "nccl.env").write_text("half written\n")
    assert cli.main(["prestart", "--spec", spec.path]) == exitcodes.REFUSED
    assert "refusing to start sglang-a.service: the files it reads" in capsys.readouterr().err
    assert state.read_status(spec)["verdict"] == "failed: its files are no release's (prestart refused)"
    assert state.read_offset(spec) is None  # no start was prepared
