"""The SGLang version read without importlib.metadata (preflight_probe.VERSION, run by the venv's
python with -I by the preflight probe and the SglangVenv fact) answers what importlib.metadata
itself answers, which is the oracle here: CPython's Lib/importlib/metadata/__init__.py, whose
Prepared.normalize and Lookup give the cases (case, separators, .egg-info, a name only a prefix)."""

import importlib.metadata
import subprocess
import sys

import pytest

from sglang_pve.agent import preflight_probe

SITE = {
    "sglang-0.5.16.dev20260720+g8905cbd42.dist-info": ("METADATA", "0.5.16.dev20260720+g8905cbd42"),
    "sglang_router-0.3.2.dist-info": ("METADATA", "0.3.2"),
    "SGLang_Kernel-0.4.1.DIST-INFO": ("METADATA", "0.4.1"),
    "Foo.Bar-1.0.egg-info": ("PKG-INFO", "1.0"),
    "sglangx-9.9.dist-info": ("METADATA", "9.9"),
}
NAMES = ["sglang", "sglang-router", "sglang_router", "SGLang.Router", "sglang-kernel", "foo-bar", "foo_bar", "sglangx"]


def reader():
    namespace: dict = {}
    exec(preflight_probe.VERSION, namespace)  # noqa: S102 - the text the hosts run
    return namespace["dist_version"]


@pytest.fixture
def site(tmp_path):
    for directory, (meta, version) in SITE.items():
        (tmp_path / directory).mkdir()
        (tmp_path / directory / meta).write_text(
            f"Metadata-Version: 2.1\nName: x\nVersion: {version}\nSummary: s\n\nVersion: not-a-header\n"
        )
    (tmp_path / "sglang").mkdir()  # the package itself, not metadata
    (tmp_path / "notes.txt").write_text("sglang-1.0.dist-info")
    return tmp_path


@pytest.mark.parametrize("name", [*NAMES, "absent", "sglang-route"])
def test_it_answers_what_importlib_metadata_answers(site, name):
    found = next(iter(importlib.metadata.distributions(name=name, path=[str(site)])), None)
    assert reader()(str(site), name) == ("" if found is None else found.version)


def test_no_directory_is_no_version(tmp_path):
    assert reader()(str(tmp_path / "missing"), "sglang") == ""


def test_the_venvs_python_runs_it_with_its_purelib():
    """As the hosts run it: `python -I -c VERSION NAME` by this venv's python, purelib from sysconfig."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", preflight_probe.VERSION, "pytest"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == importlib.metadata.version("pytest")
