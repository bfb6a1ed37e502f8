"""digest_script run by a real sh on real files (the JSON cases give parse_digests what it prints):
links and non-regular files are named, never followed; a missing one is missing; regular ones get
mode, owner and sha1 from one stat and one sha1sum, whatever their names."""

import grp
import hashlib
import os
import pwd
import subprocess

from sglang_pve.deploy.facts.files import NOT_A_FILE, FileState, digest_script, parse_digests


def digests(paths):
    done = subprocess.run(["sh", "-c", digest_script(paths)], capture_output=True, text=True, check=True)
    return parse_digests(done.stdout.splitlines())


def test_files_links_directories_and_missing_ones(tmp_path):
    regular, spaced, dashed = tmp_path / "nccl.conf", tmp_path / "a b", tmp_path / "-n"
    regular.write_text("NCCL_PROTO=LL\n")
    spaced.write_text("")
    dashed.write_text("x")
    regular.chmod(0o600)
    spaced.chmod(0o644)
    dashed.chmod(0o640)
    (tmp_path / "link").symlink_to(regular)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir").mkdir()
    me = (pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name)
    names = ["nccl.conf", "a b", "-n", "link", "dangling", "dir", "missing", "nccl.conf"]
    found = digests([str(tmp_path / name) for name in names])
    assert found == {
        str(regular): FileState(hashlib.sha1(b"NCCL_PROTO=LL\n").hexdigest(), "600", *me),
        str(spaced): FileState(hashlib.sha1(b"").hexdigest(), "644", *me),
        str(dashed): FileState(hashlib.sha1(b"x").hexdigest(), "640", *me),
        str(tmp_path / "link"): NOT_A_FILE,
        str(tmp_path / "dangling"): NOT_A_FILE,
        str(tmp_path / "dir"): NOT_A_FILE,
        str(tmp_path / "missing"): None,
    }


def test_only_missing_files_run_no_stat_at_all(tmp_path):
    assert digests([str(tmp_path / "a"), str(tmp_path / "b")]) == {str(tmp_path / "a"): None, str(tmp_path / "b"): None}


def test_a_file_sha1sum_cannot_read_reads_as_changed(tmp_path):
    """(sha1 "": differs from any content, so the write replaces it.) A stat line without its sum."""
    assert parse_digests([f"{tmp_path}/f\t644\troot\troot"]) == {f"{tmp_path}/f": FileState("", "644", "root", "root")}
