"""A venv build's live progress (deploy/venv_progress.py, operations/venvs.py): the installer's log,
read by the host's grep, summed up in a line that never shows a URL; the log root-only, and a failed
installer's own words (its DEBUG lines left out) still on stderr. The logs are uv 0.13.9's (the
pinned one) with -v against the lab's index (tests/unit/fixtures/installer_logs/)."""

import os
import stat
import subprocess
from pathlib import Path

from pyinfra.api import StringCommand

from sglang_pve.deploy import venv_progress
from sglang_pve.deploy.operations import venvs

LOGS = Path(__file__).parent / "fixtures" / "installer_logs"


def _host_lines(log: Path) -> list[str]:
    """What the watch's command sends of `log`, run as the host runs it."""
    command = venv_progress.watch(str(log), "sglang 1", "x").command
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout.splitlines()


def _prefixes(lines: list[str]) -> list[str]:
    """The summary as the log grew, each distinct one once, in order."""
    seen: list[str] = []
    for end in range(len(lines) + 1):
        text = venv_progress.summary(lines[:end])
        if not seen or seen[-1] != text:
            seen.append(text)
    return seen


def test_resolving_counts_what_uv_selected_until_it_resolved():
    lines = _host_lines(LOGS / "uv-0.13.9-compile-v.log")
    assert all(not line.startswith(("DEBUG No cache", "DEBUG Failed", "WARN")) for line in lines)  # the host filters
    said = _prefixes(lines)
    assert said[0] == "started, nothing to report yet"
    assert said[1] == "1 packages selected, latest sglang-router==0.3.2"
    assert said[-1] == "resolved 25 packages" and all(" packages selected, latest " in s for s in said[1:-1])


def test_installing_counts_the_wheels_fetched_names_the_large_ones_in_flight_until_installed():
    said = _prefixes(_host_lines(LOGS / "uv-0.13.9-install-v.log"))
    fetching = [s for s in said if s.startswith("fetching ")]
    assert fetching[0] == "fetching 0 of 1" and "fetching 25 of 25 (in flight: sglang-router 29.3MiB)" in fetching
    assert said[-2:] == ["25 packages fetched, installing them into the venv", "installed 25 packages"]
    line = venv_progress.line("sglang 0.5.9", "installing", _host_lines(LOGS / "uv-0.13.9-install-v.log"), 95.4)
    assert line == "progress: venv sglang 0.5.9 installing 95 s: installed 25 packages"


def test_a_url_shows_its_file_name_only_and_anything_else_odd_is_a_question_mark():
    url = "https://user:s3cret@proxy.example/simple/torch/torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=ab"
    pip = ["Collecting torch==2.9.1", f"  Downloading {url} (846.3 MB)"]
    assert venv_progress.summary(pip) == (
        "1 collected, downloading torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl (846.3 MB)"
    )
    assert venv_progress.shown("https://user:s3cret@proxy.example/simple/torch/") == "?"  # no file: nothing of it
    assert venv_progress.shown("torch\x1b[2J") == "?" and venv_progress.shown("user:s3cret@host") == "?"
    hostile = ["DEBUG Selecting: evil\u202e==1 [compatible] (x.whl)", "Downloading a\x1bb (1.0MiB)"]
    assert venv_progress.summary(hostile) == "fetching (in flight: ? 1.0MiB)"
    assert venv_progress.summary(hostile[:1]) == "1 packages selected, latest ?"
    assert venv_progress.summary(["Installing collected packages: a, b, c"]) == "installing 3 packages into the venv"
    assert venv_progress.summary(["Installing collected packages: a", "Successfully installed a-1"]) == "done"


def _run(words: list) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", StringCommand(*words).get_raw_value()], capture_output=True, text=True)


def test_the_log_is_root_only_and_a_failed_installer_still_says_why_without_its_debug_lines(tmp_path):
    log = str(tmp_path / ".sglang-1.partial-run.install.log")
    failing = ["sh", "-c", '\'echo "DEBUG Selecting: a==1" >&2; echo "error: no wheel for a" >&2; exit 2\'']
    result = _run([*venvs._new_log(log), "&&", *venvs._logged(failing, log), "&&", "echo", "not reached"])
    assert result.returncode != 0 and "not reached" not in result.stdout
    assert "error: no wheel for a" in result.stderr and "DEBUG" not in result.stderr
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600 and "DEBUG Selecting: a==1" in Path(log).read_text()
    ok = _run([*venvs._new_log(log), "&&", *venvs._logged(["echo", "fine"], log, stdout=True), "&&", "echo", "next"])
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "next\n", "") and Path(log).read_text() == "fine\n"
