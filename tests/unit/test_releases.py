"""Releases without a lab: nightly resolution against a real HTTP index, the host's release store
on real files, and the decisions of the venv and release operations against canned facts."""

import base64
import functools
import hashlib
import http.server
import json
import os
import threading

import pytest
from packaging.version import Version
from pyinfra.api import StringCommand

from sglang_pve.agent import release_store
from sglang_pve.agent.release_store import ReleaseError, Store
from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.config.indexes import IndexLogin, masked
from sglang_pve.config.secrets import Secret
from sglang_pve.config.supply import UV_PIN
from sglang_pve.deploy import index
from sglang_pve.deploy.operations import releases, venvs
from sglang_pve.tools.status_render import release_change, releases_table
from tests.conftest import PROJECT, group_data
from tests.unit.agent_support import rendered
from tests.unit.test_operations import run

NIGHTLIES = ["0.5.16.dev20260720+g8905cbd42", "0.5.16.dev20260721+g3f2a9c1d7", "0.5.16.dev20260723+gc0ffee123"]
PAGE = "\n".join(f'<a href="sglang-{v}-py3-none-any.whl#sha256=00">x</a>' for v in NIGHTLIES + ["0.5.15"])


# --- nightly resolution ------------------------------------------------------------------------


def test_wheel_versions_and_pick():
    versions = index.wheel_versions(PAGE + '<a href="../torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl">t</a>')
    assert Version("0.5.15") in versions and len(versions) == 4  # torch is another project
    assert str(index.pick("nightly", versions)) == "0.5.16.dev20260723+gc0ffee123"
    assert str(index.pick("nightly-20260721", versions)) == "0.5.16.dev20260721+g3f2a9c1d7"
    assert index.pick("nightly-20260722", versions) is None
    assert not index.is_nightly(Version("0.5.15")) and not index.is_nightly(Version("0.5.16.dev0"))


def test_masked_hides_credentials_only():
    assert masked("https://user:tok@idx.example/simple/") == "https://***@idx.example/simple/"
    assert masked("https://pypi.org/simple") == "https://pypi.org/simple"


@pytest.fixture
def served_index(tmp_path):
    """A real PEP 503 index over HTTP on localhost, checking Basic credentials when given."""
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "index.html").write_text(PAGE)
    seen = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def login(host: str, name: str, password: str) -> IndexLogin:
    return IndexLogin(host, name, Secret(password, "environment variable TEST"))


def test_resolve_nightly_over_http_with_credentials_kept_out_of_errors(served_index):
    address, seen = served_index
    index.resolve_nightly.cache_clear()
    logins = (login("127.0.0.1", "u", "secret"),)
    assert index.resolve_nightly("nightly", (f"http://{address}/",), logins) == "0.5.16.dev20260723+gc0ffee123"
    assert seen == ["Basic " + base64.b64encode(b"u:secret").decode()]
    with pytest.raises(index.IndexLookupError) as error:
        index.resolve_nightly("nightly-20260722", (f"http://{address}/",), logins)
    assert "secret" not in str(error.value) and "0.5.16.dev20260723+gc0ffee123" in str(error.value)


def test_config_accepts_nightly_specs_and_resolves_through_the_given_function():
    data = group_data("all") | {"sglang_version": "nightly-20260721"}
    deployment = load_deployment("sglang1", data, PROJECT, resolve=lambda d: "0.5.16.dev20260721+g3f2a9c1d7")
    assert deployment.data.sglang_version == "nightly-20260721"
    assert deployment.sglang_version == "0.5.16.dev20260721+g3f2a9c1d7"
    for bad in ("nightly-2026", "latest", "nightly;rm"):
        with pytest.raises(ConfigError, match="sglang_version"):
            load_deployment("sglang1", group_data("all") | {"sglang_version": bad}, PROJECT)
    with pytest.raises(ConfigError, match="sglang_import_check"):
        load_deployment("sglang1", group_data("all") | {"sglang_import_check": ["sglang; import os"]}, PROJECT)


# --- the host's release store ------------------------------------------------------------------


def _spec(root, version="1.0", active="a", **files):
    paths = {}
    for name, content in files.items():
        path = root / "etc" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        paths[name] = str(path)
    venv = root / "venvs" / f"sglang-{version}"
    venv.mkdir(parents=True, exist_ok=True)
    lock = root / "venvs" / f"sglang-{version}.lock"
    lock.write_text(f"sglang=={version} --hash=sha256:00\n")
    return {
        "sglang_version": version,
        "venv": str(venv),
        "lock": str(lock),
        "active_server": active,
        "lifecycle": None,
        "units": ["sglang-a.service"],
        "nccl_profile": "p",
        "files": rendered(*paths.values()),
        "blocks": {},
        "user": "me@here",
        "commit": "abc",
    }


def test_store_records_restores_byte_for_byte_and_prunes(tmp_path):
    store = Store(str(tmp_path / "releases"))
    first = store.record(_spec(tmp_path, "1.0", unit="A\n", conf="x\n"))
    os.chmod(tmp_path / "etc" / "conf", 0o600)
    second = store.record(_spec(tmp_path, "2.0", unit="B\n", conf="x\n"))
    assert first["fingerprint"] != second["fingerprint"]
    assert oct(os.stat(store.dir).st_mode & 0o777) == "0o700"
    assert oct(os.stat(os.path.join(store.dir, f"{first['id']}.json")).st_mode & 0o777) == "0o600"
    assert second["files"][str(tmp_path / "etc" / "conf")]["mode"] == "600"

    changed = store.restore(first)
    assert sorted(changed) == [str(tmp_path / "etc" / "conf"), str(tmp_path / "etc" / "unit")]
    assert (tmp_path / "etc" / "unit").read_text() == "A\n"
    assert oct(os.stat(tmp_path / "etc" / "conf").st_mode & 0o777) == "0o644"  # the recorded mode
    assert store.restore(first) == []

    os.symlink("/etc/passwd", tmp_path / "etc" / "link")
    with pytest.raises(ReleaseError, match="symbolic link"):
        store.restore({"files": {str(tmp_path / "etc" / "link"): first["files"][str(tmp_path / "etc" / "unit")]}})

    for record in (first, second):
        record["status"] = "ready"
        store.save(record)
    store.set_current(second["id"])
    assert store.previous_id() is None  # only a switch says what ran before
    store.set_previous(first["id"])
    assert store.previous_id() == first["id"]
    summary = store.summary("previous")
    assert (
        summary["target"] == first["id"]
        and base64.b64decode(summary["contents"][str(tmp_path / "etc" / "unit")]) == b"A\n"
    )
    assert "sglang==1.0" in summary["lock"]
    assert store.summary("20990101T000000Z-00000000")["error"].startswith("no release")

    assert store.prune(1, str(tmp_path / "venvs")) == []  # the previous release is the way back: kept
    store.set_previous(None)
    # keep 1 (the current one): the first release, its venv and lock and its blobs go
    assert store.prune(1, str(tmp_path / "venvs")) == [first["id"]]
    assert not os.path.exists(first["venv"]) and not os.path.exists(first["lock"]["path"])
    assert os.path.exists(second["venv"]) and store.ids() == [second["id"]]
    assert sorted(os.listdir(os.path.join(store.dir, "blobs"))) == sorted(
        {e["sha256"] for e in second["files"].values()} | {second["lock"]["sha256"]}
    )


def _mode(path) -> str:
    return oct(os.stat(path).st_mode & 0o777)


def test_everything_the_store_writes_is_root_only(tmp_path):
    directory = tmp_path / "releases"
    directory.mkdir(mode=0o755)  # made by someone else, too open
    store = Store(str(directory))
    release = store.record(_spec(tmp_path, unit="A\n"))
    store.set_current(release["id"])
    store.set_pending(release["id"])
    with store.locked():
        pass
    blob = directory / "blobs" / release["files"][str(tmp_path / "etc" / "unit")]["sha256"]
    assert _mode(directory) == "0o700" and _mode(directory / "blobs") == "0o700"
    for path in (blob, directory / "current", directory / "pending", directory / ".lock"):
        assert _mode(path) == "0o600", path
    fresh = Store(str(tmp_path / "other"))
    with fresh.locked():  # the lock may be the first thing that makes the directory
        assert _mode(fresh.dir) == "0o700"


def test_ids_are_stamp_and_fingerprint_one_second_apart_when_recorded_within_a_second(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "releases"))
    monkeypatch.setattr("time.time", lambda: 1796038434.5)  # 2026-11-30T11:33:54Z, for every record
    first = store.record(_spec(tmp_path, "1.0"))
    second = store.record(_spec(tmp_path, "2.0"))
    assert first["id"] == "20261130T113354Z-" + first["fingerprint"][:8]
    assert second["id"] == "20261130T113355Z-" + second["fingerprint"][:8]  # later than every existing id
    assert first["time"] == second["time"] == "2026-11-30T11:33:54Z"


def test_fingerprint_ignores_the_order_blocks_were_written_in(tmp_path):
    files = {"/etc/nccl.conf": {"sha256": "aa"}}
    spec = {"sglang_version": "1", "active_server": "a", "nccl_profile": "p"}
    one = {"/root/.zshrc": {"marker": "m", "body": "x"}, "/home/u/.zshrc": {"marker": "m", "body": "y"}}
    other = dict(reversed(one.items()))
    assert release_store.fingerprint(spec | {"blocks": one}, files) == release_store.fingerprint(
        spec | {"blocks": other}, files
    )


def test_a_record_without_blocks_has_empty_blocks(tmp_path):
    spec = _spec(tmp_path)
    del spec["blocks"]
    assert Store(str(tmp_path / "releases")).record(spec)["blocks"] == {}


def test_an_unknown_id_names_the_latest_five(tmp_path):
    store = Store(str(tmp_path / "releases"))
    with pytest.raises(ReleaseError, match=r"\(latest: none\)$"):
        store.get("nope")
    ids = [store.record(_spec(tmp_path, f"{n}.0"))["id"] for n in range(6)]
    with pytest.raises(ReleaseError) as error:
        store.get("nope")
    assert str(error.value).endswith(f"(latest: {', '.join(ids[1:])})")


def test_restore_recreates_a_deleted_file_and_its_directory(tmp_path):
    store = Store(str(tmp_path / "releases"))
    release = store.record(_spec(tmp_path, unit="A\n"))
    unit = tmp_path / "etc" / "unit"
    unit.unlink()
    assert store.restore(release) == [str(unit)] and unit.read_text() == "A\n"
    (tmp_path / "etc" / "unit").unlink()
    (tmp_path / "etc").rmdir()
    assert store.restore(release) == [str(unit)] and unit.read_text() == "A\n"


def test_prune_removes_only_venvs_under_venvs_dir_that_no_kept_release_uses(tmp_path):
    store = Store(str(tmp_path / "releases"))
    elsewhere = tmp_path / "elsewhere"
    outside = store.record(_spec(tmp_path, "0.9") | {"venv": str(elsewhere / "v")})
    shared = [store.record(_spec(tmp_path, "1.0", unit=text)) for text in ("A\n", "B\n")]  # one venv, two releases
    own = store.record(_spec(tmp_path, "2.0"))
    store.set_current(own["id"])
    (elsewhere / "v").mkdir(parents=True)
    venvs = str(tmp_path / "venvs")
    assert store.prune(2, venvs) == [outside["id"], shared[0]["id"]]
    assert os.path.isdir(elsewhere / "v")  # not under venvs_dir: never removed
    assert os.path.isdir(shared[0]["venv"]) and os.path.exists(shared[0]["lock"]["path"])  # a kept one uses it

    os.rmdir(own["venv"])  # gone already: removing it again is no error
    store.set_current(store.record(_spec(tmp_path, "3.0"))["id"])
    assert store.prune(1, venvs) == [shared[1]["id"], own["id"]]
    assert not os.path.exists(shared[1]["venv"]) and not os.path.exists(own["lock"]["path"])

    later = store.record(_spec(tmp_path, "4.0") | {"venv": str(elsewhere / "w")})
    (elsewhere / "w").mkdir()
    store.set_current(store.record(_spec(tmp_path, "5.0"))["id"])
    assert store.prune(1)[-1] == later["id"] and not os.path.exists(elsewhere / "w")  # no venvs_dir: any venv


def test_a_restored_file_is_on_disk_root_only_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """Crash safety: the temp file holds every byte (flushed, fsynced; a small file would otherwise
    still sit in the write buffer) and nobody else may read it before the rename puts it in place;
    its recorded mode comes with the rename."""
    store = Store(str(tmp_path / "releases"))
    release = store.record(_spec(tmp_path, unit="A" * 100))
    (tmp_path / "etc" / "unit").write_text("B")
    seen, real_fsync, real_replace = {}, os.fsync, os.replace

    def fsync(fd):
        info = os.fstat(fd)
        seen["fsynced"] = (info.st_size, oct(info.st_mode & 0o777))
        real_fsync(fd)

    def replace(source, target):
        seen["replaced"] = (seen.pop("fsynced", None), _mode(source))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    assert store.restore(release) == [str(tmp_path / "etc" / "unit")]
    assert seen["replaced"] == ((100, "0o600"), "0o644")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_restored_file_gets_its_recorded_owner(tmp_path):
    store = Store(str(tmp_path / "releases"))
    spec = _spec(tmp_path, unit="A\n")
    os.chown(tmp_path / "etc" / "unit", 65534, 65534)
    release = store.record(spec)
    (tmp_path / "etc" / "unit").unlink()
    store.restore(release)
    info = os.stat(tmp_path / "etc" / "unit")
    assert (info.st_uid, info.st_gid) == (65534, 65534)


def test_a_failed_restore_leaves_no_temp_file(tmp_path):
    store = Store(str(tmp_path / "releases"))
    release = store.record(_spec(tmp_path, unit="A\n"))
    unit = tmp_path / "etc" / "unit"
    unit.unlink()
    (unit / "inside").mkdir(parents=True)  # a directory where the file was: the rename fails
    with pytest.raises(OSError):
        store.restore(release)
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["unit"]


def test_summary_of_a_named_release_needs_no_previous(tmp_path):
    store = Store(str(tmp_path / "releases"))
    only = store.record(_spec(tmp_path, unit="A\n"))
    assert store.summary(only["id"])["target"] == only["id"]
    assert store.summary("previous") | {"releases": []} == {
        "current": None,
        "pending": None,
        "releases": [],
        "previous": None,
        "lease": None,
        "target": None,
        "error": f"no release ran before the current one in {store.dir} (nothing to roll back to)",
    }


def test_one_record_and_switch_at_a_time(tmp_path):
    import fcntl

    store = Store(str(tmp_path / "releases"))
    with store.locked():
        fd = os.open(os.path.join(store.dir, ".lock"), os.O_RDWR)
        with pytest.raises(BlockingIOError):  # a second switch (a rerun after a killed deploy) waits
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    with store.locked():  # released on exit
        pass


def test_a_switch_is_pending_until_it_ends(tmp_path, monkeypatch):
    from sglang_pve.agent import switch

    store = Store(str(tmp_path / "releases"))
    release = store.record(_spec(tmp_path))

    def killed(*_):
        assert store.pending() == release["id"]  # written before anything stops
        raise KeyboardInterrupt  # the agent dies mid-switch, as under SIGKILL nothing after runs

    monkeypatch.setattr(switch, "_run", killed)
    with pytest.raises(KeyboardInterrupt):
        switch.switch(store, release["id"], lambda *a, **k: None)
    assert store.summary()["pending"] == release["id"] and store.current_id() is None
    monkeypatch.setattr(switch, "_run", lambda *_: None)
    assert switch.switch(store, release["id"], lambda *a, **k: None) == 0
    assert store.pending() is None and store.current_id() == release["id"]


def test_release_change_and_table_name_what_differs(tmp_path):
    store = Store(str(tmp_path / "releases"))
    first = store.record(_spec(tmp_path, "1.0", unit="A\n"))
    second = store.record(_spec(tmp_path, "2.0", unit="B\n"))
    assert release_change(second, first) == "SGLang 1.0 -> 2.0; 1 file(s): unit"
    report = type("R", (), {"releases": [first, second], "current": second["id"], "previous": first["id"]})
    table = releases_table("h", report)
    assert f"*  {second['id']}" in table and f"<  {first['id']}" in table


# --- operation decisions -----------------------------------------------------------------------

SOURCE = venvs.Source(
    index_url="https://idx.example/simple",
    logins=(login("idx.example", "u", "tok"),),
    installer="uv",
    uv_version="0.13.9",
    uv_sha256=UV_PIN.sha256,
    import_check=("sglang", "yaml"),
)


def venv_run(fact_lines, **kwargs):
    return run(
        venvs.venv,
        {"def dist_version": fact_lines},
        ("def dist_version",),
        path="/opt/v/sglang-1.0",
        version="1.0",
        run="r1",
        **kwargs,
    )


def test_venv_is_a_noop_when_installed_and_locked():
    assert venv_run(["version 1.0", "lock ab12", "uv 0.13.9"], source=SOURCE) == []


def test_venv_is_built_beside_its_path_from_a_hash_lock_and_moved_into_place():
    joined = "\n".join(venv_run(["uv 0.13.9"], source=SOURCE))
    build = "/opt/v/.sglang-1.0.partial-r1"  # per run: a killed run's build left running is not wiped
    assert "rm -rf -- /opt/v/.sglang-1.0.partial-* && " in joined  # removed before (the deploy lock is held)
    assert f"python3 -m venv --without-pip {build}" in joined  # uv installs into it from outside
    assert (
        f"pip compile {build}/sglang-pve-resolve/pyproject.toml -v --generate-hashes" in joined
        and "--index-url https://idx.example/simple" in joined
    )
    assert "pip install -v --require-hashes --no-deps" in joined and "-c 'import sglang, yaml'" in joined
    assert f"2>> {build}.resolve.log ||" in joined and f"2>> {build}.install.log ||" in joined  # live progress
    logs = f"{build}.resolve.log {build}.install.log"
    assert f"|| {{ rm -rf {build} {logs} ; exit 1 ; }}" in joined  # a failed step leaves nothing half-built
    assert joined.index("--require-hashes") < joined.index(f"mv -T {build} /opt/v/sglang-1.0")
    assert f"compileall -q -s {build} -p /opt/v/sglang-1.0" in joined  # bytecode names the final path
    assert "chmod 600" in joined and "/opt/v/sglang-1.0.lock" in joined
    assert "# index-url https://idx.example/simple" in joined and "tok" not in joined


def test_venv_installs_uv_first_and_pip_resolves_through_its_report():
    joined = "\n".join(venv_run([], source=SOURCE))
    assert (
        'NETRC=/etc/sglang/secrets/index.netrc /opt/sglang-pve/uv/bin/python "$w/pip" install --quiet '
        "--disable-pip-version-check --no-input --require-hashes --no-deps --only-binary :all: "
        "--index-url https://idx.example/simple -r /opt/sglang-pve/uv/uv-requirement.txt"
    ) in joined
    # neither uv's venv nor a build uv installs into gets ensurepip's pip and setuptools
    assert "python3 -m venv --without-pip /opt/sglang-pve/uv &&" in joined
    assert "python3 -m venv --without-pip /opt/v/.sglang-1.0.partial-" in joined
    pip = venvs.Source(index_url="https://pypi.org/simple", installer="pip")
    joined = "\n".join(venv_run([], source=pip))
    assert "uv" not in joined.replace("--no-input", "")
    assert "--dry-run --report" in joined and "--require-hashes --no-deps" in joined


CANARY = "c4n4ry-T0k3n"


def test_index_credentials_reach_the_installers_through_a_root_only_netrc_never_argv():
    for installer in ("uv", "pip"):
        source = venvs.Source(
            index_url="https://idx.example/simple",
            installer=installer,
            uv_version="0.13.9",
            uv_sha256=UV_PIN.sha256,
            extra_index_urls=("https://idx.example/whl/", "https://pypi.org/simple"),
            logins=(login("idx.example", "u", CANARY),),
        )
        for lock in (None, "sglang==1.0 --hash=sha256:00\n"):
            commands = venv_run([], source=source, lock=lock)
            assert CANARY not in "\n".join(commands) and "*MASKED*" not in "\n".join(commands)  # not hidden: absent
            installers = [c for c in commands if " install " in c or " compile " in c]
            assert installers and all("NETRC=/etc/sglang/secrets/index.netrc " in c for c in installers)
            written = next(c for c in commands if "t=/etc/sglang/secrets/index.netrc;" in c)  # uploaded, then installed
            assert "chown -h root:root" in written and "chmod 600" in written
            assert commands.index(written) < commands.index(installers[0])
        raw = StringCommand(*venvs._resolve(source, "1.0", "/b"), *venvs._install(source, "/b")).get_raw_value()
        assert CANARY not in raw and "https://idx.example/whl/" in raw  # what the target's ps would show
    plain = venvs.Source(index_url="https://pypi.org/simple", installer="pip")
    assert plain.netrc is None and "NETRC" not in "\n".join(venv_run([], source=plain))


def test_netrc_holds_one_entry_per_login():
    source = venvs.Source(
        index_url="https://idx.example/simple",
        extra_index_urls=("https://idx.example:8443/whl/", "https://pypi.org/simple", "https://other.example/simple"),
        logins=(login("idx.example", "alice", "p@ss/w0rd"), login("other.example", "__token__", "t0k")),
    )
    assert source.netrc.content == (
        "machine idx.example login alice password p@ss/w0rd\nmachine other.example login __token__ password t0k\n"
    )
    assert source.netrc.mode == "600" and source.netrc.user == "root" and source.netrc.secret


def test_netrc_content_is_hidden_under_diff(caplog):
    import logging

    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.inventory import Inventory
    from pyinfra.api.operation import add_op

    source = venvs.Source(
        index_url="https://idx.example/simple", installer="pip", logins=(login("idx.example", "u", CANARY),)
    )
    inventory = Inventory(
        (["@fake/t"], {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": {"def dist_version": []}})
    )
    state = State(inventory=inventory, config=Config(DIFF=True))
    connect_all(state)
    with caplog.at_level(logging.DEBUG):
        add_op(state, venvs.venv, path="/opt/v/sglang-1.0", version="1.0", source=source, run="r1")
    assert "/etc/sglang/secrets/index.netrc (holds secrets: content not shown)" in caplog.text
    assert CANARY not in caplog.text


def test_venv_from_a_recorded_lock_does_not_resolve():
    commands = venv_run(["uv 0.13.9"], source=SOURCE, lock="sglang==1.0 --hash=sha256:00\n")
    joined = "\n".join(commands)
    assert "pip compile" not in joined and "--require-hashes" in joined
    assert any(c.startswith("upload") or "sglang-pve.lock" in c for c in commands)


RECORD = {
    "id": "20261130T000000Z-aaaaaaaa",
    "sglang_version": "1.0",
    "active_server": "a",
    "nccl_profile": "p",
    "units": ["sglang-a.service", "sglang-b.service"],
    "blocks": {},
    "venv": "/v",
    "commit": "c",
    "lock": {"path": "/v.lock", "sha256": "00"},
    "status": "ready",
    "files": {
        "/etc/systemd/system/sglang-a.service": {"sha256": "1"},
        "/etc/systemd/system/sglang-b.service": {"sha256": "2"},
    },
}
WANTED = releases.Release(
    sglang_version="1.0",
    venv="/v",
    active_server="a",
    units=("sglang-a.service", "sglang-b.service"),
    nccl_profile="p",
    files={"/etc/systemd/system/sglang-a.service": "1", "/etc/systemd/system/sglang-b.service": "2"},
)


def release_run(release, running=("sglang-a.service",), pending=None):
    report = {
        "current": RECORD["id"],
        "pending": pending,
        "releases": [RECORD],
        "previous": None,
        "running": list(running),
    }
    return run(
        releases.release,
        {"releases --dir": json.dumps(report)},
        ("releases --dir",),
        release=release,
        keep=5,
        venvs_dir="/opt/v",
        lease="r1",
    )


def test_release_is_a_noop_when_current_and_running():
    assert release_run(WANTED) == []


def test_release_switches_when_the_version_changes_or_the_server_is_down():
    from dataclasses import replace

    for commands in (
        release_run(replace(WANTED, sglang_version="2.0")),
        release_run(WANTED, running=()),
        release_run(WANTED, pending=RECORD["id"]),
    ):  # a killed switch: what runs is unknown
        assert len(commands) == 1 and " apply --spec " in commands[0] and "--record-only" not in commands[0]
        spec = json.loads(base64.b64decode(commands[0].split("--spec ")[1].split()[0]))
        assert spec["lifecycle"] == "/etc/sglang/servers/a.lifecycle.json" and spec["lock"] == "/v.lock"


@pytest.mark.parametrize(
    "changes, running, pending, why",
    [
        ({"sglang_version": "2.0"}, ["sglang-a.service"], None, "SGLang 1.0 -> 2.0"),
        ({}, [], None, "sglang-a.service does not run"),
        ({}, ["sglang-a.service"], "r0", "a switch was left unfinished"),
        (
            {"active_server": "b", "files": WANTED.files | {"/etc/systemd/system/sglang-a.service": "3"}},
            [],
            None,
            "active server a -> b; 1 file(s) changed (/etc/systemd/system/sglang-a.service); "
            "sglang-a.service does not run",
        ),
    ],
)
def test_a_switch_says_why(changes, running, pending, why, caplog):
    """Said without -v: an operator learns why the deploy restarts the server."""
    from dataclasses import replace

    with caplog.at_level("INFO", logger="pyinfra"):
        [command] = release_run(replace(WANTED, **changes), running=running, pending=pending)
    assert " apply --spec " in command
    assert [r.getMessage().split("] ", 1)[-1] for r in caplog.records if "switching: " in r.getMessage()] == [
        f"switching: {why}"
    ]


def test_release_records_without_restart_when_only_an_idle_configuration_changed():
    from dataclasses import replace

    changed = replace(WANTED, files=WANTED.files | {"/etc/systemd/system/sglang-b.service": "3"})
    [command] = release_run(changed)
    assert "--record-only" in command
    changed = replace(WANTED, files=WANTED.files | {"/etc/systemd/system/sglang-a.service": "3"})
    [command] = release_run(changed)
    assert "--record-only" not in command
    [command] = release_run(
        replace(WANTED, files=WANTED.files | {"/etc/systemd/system/sglang-b.service": "3"}), pending=RECORD["id"]
    )
    assert "--record-only" not in command


# --- retention keeps the way back ----------------------------------------------------------------


def _ready(store, tmp_path, version, status="ready", **files):
    record = store.record(_spec(tmp_path, version, **files))
    record["status"] = status
    store.save(record)
    return record


def test_prune_removes_failed_and_duplicate_releases_first_and_keeps_the_last_good_ones(tmp_path):
    """releases_kept=2: a baseline, a never-ready nightly (failed), eagle3 ready: the failed one
    goes, the baseline (what a rollback needs) and its venv stay."""
    store = Store(str(tmp_path / "releases"))
    venvs = str(tmp_path / "venvs")
    baseline = _ready(store, tmp_path, "1.0", unit="A\n")
    nightly = _ready(store, tmp_path, "2.0", "failed", unit="N\n")
    eagle = _ready(store, tmp_path, "1.0", unit="E\n")
    store.set_current(eagle["id"])
    assert store.prune(2, venvs) == [nightly["id"]]
    assert store.ids() == [baseline["id"], eagle["id"]] and os.path.exists(baseline["venv"])
    assert not os.path.exists(nightly["venv"])  # only the failed release used it

    again = _ready(store, tmp_path, "1.0", unit="E\n")  # eagle deployed again: a duplicate
    store.set_current(again["id"])
    assert store.prune(2, venvs) == [eagle["id"]]  # the older copy goes, never the baseline
    assert store.ids() == [baseline["id"], again["id"]]
    newer = _ready(store, tmp_path, "1.0", unit="F\n")
    store.set_current(newer["id"])
    assert store.prune(2, venvs) == [baseline["id"]]  # then the oldest ready one
    store.set_previous(again["id"])
    assert store.prune(1, venvs) == []  # previous and current: the way back stays whatever keep says


def test_the_default_rollback_goes_to_what_ran_before_and_a_second_stays(tmp_path, monkeypatch):
    """Deploy R0, R1; roll back (to R0); deploy R3: the default rollback goes to R0, what ran
    before R3, not to R1, the release rolled back from (ids order them R0 < R1 < R3)."""
    from sglang_pve.agent import switch

    monkeypatch.setattr(switch, "_run", lambda *_: None)  # every switch succeeds
    store = Store(str(tmp_path / "releases"))
    quiet = lambda *a, **k: None  # noqa: E731
    r0, r1 = (store.record(_spec(tmp_path, v, unit=f"{v}\n")) for v in ("0", "1"))
    assert switch.switch(store, r0["id"], quiet) == 0 and store.previous_id() is None
    assert switch.switch(store, r1["id"], quiet) == 0 and store.previous_id() == r0["id"]
    assert switch.switch(store, r0["id"], quiet, rollback=True) == 0
    assert store.current_id() == r0["id"] and store.previous_id() == r0["id"]  # a second rollback stays
    r3 = store.record(_spec(tmp_path, "3", unit="3\n"))
    assert switch.switch(store, r3["id"], quiet) == 0
    assert store.previous_id() == r0["id"] and store.summary("previous")["target"] == r0["id"]


# --- secret files stay on the host -------------------------------------------------------------

SECRET_CANARY = "canary-secret-release-5b1e"


def _secret_release(tmp_path, value):
    store = Store(str(tmp_path / "releases"))
    spec = _spec(tmp_path, unit="A\n", key=f"api-key: {value}\n")
    spec["secrets"] = [str(tmp_path / "etc" / "key")]
    return store, store.record(spec)


def test_a_secret_file_is_marked_and_its_content_never_in_the_summary(tmp_path):
    store, old = _secret_release(tmp_path, SECRET_CANARY + "-old")
    key, unit = str(tmp_path / "etc" / "key"), str(tmp_path / "etc" / "unit")
    assert old["files"][key]["secret"] is True and "secret" not in old["files"][unit]
    (tmp_path / "etc" / "key").write_text(f"api-key: {SECRET_CANARY}-new\n")
    new = store.record(_spec(tmp_path, "2.0", unit="B\n", key=f"api-key: {SECRET_CANARY}-new\n") | {"secrets": [key]})
    store.set_current(new["id"])
    store.set_previous(old["id"])
    summary = store.summary("previous")
    sent = json.dumps(summary)
    assert sent.count(SECRET_CANARY) == 0  # not as text...
    assert not any(SECRET_CANARY.encode() in base64.b64decode(v) for v in summary["contents"].values())  # ...nor base64
    assert list(summary["contents"]) == [unit]
    assert summary["secret_sha1"] == {key: hashlib.sha1(f"api-key: {SECRET_CANARY}-old\n".encode()).hexdigest()}
    assert store.restore(old) == sorted([key, unit])  # the host restores it from its own blob
    assert (tmp_path / "etc" / "key").read_text().count(SECRET_CANARY + "-old") == 1


def test_an_unmarked_record_of_a_file_in_the_secrets_dir_is_kept_back_too(monkeypatch, tmp_path):
    store, record = _secret_release(tmp_path, SECRET_CANARY)
    key = str(tmp_path / "etc" / "key")
    del record["files"][key]["secret"]  # a record from before the mark
    store.save(record)
    monkeypatch.setattr(release_store.contract, "SECRETS_DIR", str(tmp_path / "etc"))
    summary = store.summary(record["id"])
    assert summary["contents"] == {} and sorted(summary["secret_sha1"]) == sorted(record["files"])


def test_the_rollback_diff_says_a_secret_changes_never_how(tmp_path, caplog):
    import logging

    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.inventory import Inventory
    from pyinfra.api.operation import add_op

    store, record = _secret_release(tmp_path, SECRET_CANARY + "-old")
    record["status"] = "ready"
    store.save(record)
    key, unit = str(tmp_path / "etc" / "key"), str(tmp_path / "etc" / "unit")
    report = store.summary(record["id"]) | {"current": None, "running": []}
    entry = record["files"][unit]
    digests = (  # facts/files.py digest_script: the stat lines, then sha1sum's
        f"{key}\t600\troot\troot\n"
        f"{unit}\t{entry['mode']}\t{entry['user']}\t{entry['group']}\n"
        f"{'0' * 40}  {key}\n"  # the secret differs on the host, the unit is the record's
        f"{hashlib.sha1(b'A' + bytes([10])).hexdigest()}  {unit}"
    )
    inventory = Inventory(
        (
            ["@fake/t"],
            {
                "fake_delay": 0,
                "fake_delay_jitter": 0,
                "fake_responses": {"releases --dir": json.dumps(report), "sha1sum": digests},
            },
        )
    )
    state = State(inventory=inventory, config=Config(DIFF=True))
    connect_all(state)
    with caplog.at_level(logging.DEBUG):
        add_op(state, releases.rolled_back, to=record["id"], keep=5, venvs_dir="/opt/v", lease="r1")
    assert f"Will replace {key} (holds secrets: content not shown)" in caplog.text
    assert f"Will modify {unit}" not in caplog.text  # unchanged: not shown
    assert caplog.text.count(SECRET_CANARY) == 0


def test_the_rendered_release_names_its_secret_files(tmp_path, monkeypatch):
    from sglang_pve.deploy import paths, render

    key = tmp_path / "api-key"
    key.write_text(SECRET_CANARY + "\n")
    key.chmod(0o600)
    monkeypatch.setenv("SGLANG_PVE_TEST_HF", SECRET_CANARY)
    secrets = {"api-key": {"file": str(key)}, "env": {"HF_TOKEN": {"env": "SGLANG_PVE_TEST_HF"}}}
    deployment = load_deployment("sglang1", group_data("all") | {"sglang_secrets": secrets}, PROJECT)
    release = render.release(deployment, "/opt/v/sglang-1.0", "/opt/v/sglang-1.0/lib/site-packages")
    names = sorted(deployment.servers)
    assert sorted(release.secrets) == sorted(
        [paths.secret_config_path(n) for n in names] + [paths.secret_env_path(n) for n in names]
    )
    assert set(release.secrets) <= set(release.files)
    assert release.agent_spec()["secrets"] == sorted(release.secrets)
    assert json.dumps(release.agent_spec()).count(SECRET_CANARY) == 0  # digests only in what goes to the host
