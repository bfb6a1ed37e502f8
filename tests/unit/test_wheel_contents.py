"""What the wheel holds: the package with its templates, bench texts and packaged deploys; no lab/,
no tests (tests/lab/test_wheel.py installs it and runs the lab deploy from it)."""

import zipfile

import pytest

from tests.conftest import PROJECT, build_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def names(wheel) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _sources(pattern: str) -> set[str]:
    return {path.relative_to(PROJECT).as_posix() for path in PROJECT.glob(pattern)}


def test_the_templates_and_bench_texts_are_package_data(names):
    templates = _sources("sglang_pve/deploy/templates/*.j2")
    assert templates and templates <= names
    texts = _sources("sglang_pve/tools/bench/texts/*")
    assert texts and texts <= names


def test_every_module_of_the_package_is_in_it(names):
    modules = _sources("sglang_pve/**/*.py")
    assert "sglang_pve/deploys/full.py" in modules and modules <= names


def test_no_lab_and_nothing_beside_the_package(names):
    outside = {name for name in names if not name.startswith(("sglang_pve/", "sglang_pve-"))}
    assert not outside, sorted(outside)  # lab/, tests/, tasks/, bench/ are this repository's, not the toolkit's


def test_the_connector_entry_point_is_registered(wheel, names):
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "pveguest = sglang_pve.provision.connector:GuestConnector" in entry_points
    assert "pvenode = sglang_pve.provision.keepalive:NodeConnector" in entry_points
