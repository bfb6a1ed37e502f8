"""The supply chain (issue 16, 5): the pinned uv, each package from the index named for it, wheels only."""

import re
import shlex
import tomllib

import pytest
from pyinfra.api import StringCommand

from lab import index as lab_index
from lab import layout
from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.config.deployment import HostData
from sglang_pve.config.supply import UV_PIN, read_pin
from sglang_pve.deploy.operations import venvs
from tests.conftest import PROJECT, group_data

SGLANG_INDEX = "https://docs.sglang.ai/whl/cu130/"
SOURCE = venvs.Source(
    index_url="https://pypi.org/simple",
    extra_index_urls=("https://idx.example/whl/",),
    installer="uv",
    uv_version=UV_PIN.version,
    uv_sha256=UV_PIN.sha256,
    index_packages=("sglang", "sgl-kernel"),
    sdist_allowed=("pycountry",),
)


def words(command: list) -> list[str]:
    return shlex.split(StringCommand(*command).get_raw_value())


def load(**changes):
    return load_deployment("sglang1", group_data("all") | changes, PROJECT)


def test_the_pin_is_one_file_read_by_the_model_and_the_lab():
    assert HostData.model_fields["uv_version"].default == UV_PIN.version == layout.UV_VERSION
    assert HostData.model_fields["uv_sha256"].default == list(UV_PIN.sha256)
    assert len(UV_PIN.sha256) >= 2  # x86_64 and aarch64 wheels
    # the lab downloads it with its hashes required, from the same file
    assert lab_index.installer_requirements()[:1] == ["--require-hashes"]
    assert lab_index.installer_requirements()[-1] == str(layout.UV_REQUIREMENT)


@pytest.mark.parametrize("text", ["uv==1.0\n", "uv==1.0 --hash=sha256:abc\n", "uv>=1 --hash=sha256:" + "a" * 64])
def test_a_pin_without_a_full_sha256_is_refused(text):
    with pytest.raises(ValueError, match="uv==VERSION --hash"):
        read_pin(text)


def test_uv_is_installed_with_hashes_required_wheels_only_from_the_default_index():
    from types import SimpleNamespace  # noqa: PLC0415

    from tests.unit.test_json_cases import FakeHost, ctx_host, ctx_state  # noqa: PLC0415

    fake = FakeHost({"venvs.SglangVenv": {"*": []}, "venvs.VenvParents": {"*": ["0 755 /v", "0 755 /"]}})
    with ctx_host.use(fake), ctx_state.use(SimpleNamespace(config=SimpleNamespace(DIFF=False))):
        commands = list(venvs.venv._inner(path="/v/sglang-1.0", version="1.0", source=SOURCE, run="r"))
    first = next(c for c in commands if isinstance(c, StringCommand) and "uv-requirement" in c.get_raw_value())
    argv = shlex.split(first.get_raw_value())
    assert argv[argv.index("printf") + 2] == " ".join(
        [f"uv=={UV_PIN.version}", *(f"--hash=sha256:{h}" for h in UV_PIN.sha256)]
    )
    pip = argv[argv.index("install") :]
    assert {"--require-hashes", "--no-deps"} <= set(pip) and pip[pip.index("--only-binary") + 1] == ":all:"
    assert pip[pip.index("--index-url") + 1] == "https://pypi.org/simple" and "--extra-index-url" not in pip


def test_resolve_pins_sglangs_packages_to_an_explicit_index_and_nothing_else():
    pyproject = tomllib.loads(SOURCE.resolve_pyproject("0.5.16.dev20260720+g8905cbd42"))
    assert pyproject["project"]["dependencies"] == ["sglang==0.5.16.dev20260720+g8905cbd42", "sgl-kernel"]
    assert pyproject["tool"]["uv"]["sources"] == {
        "sglang": {"index": "sglang-index"},
        "sgl-kernel": {"index": "sglang-index"},
    }
    # explicit: read only for the pinned names; the URL has no credentials (they are in NETRC=)
    assert pyproject["tool"]["uv"]["index"] == [
        {"name": "sglang-index", "url": "https://idx.example/whl/", "explicit": True}
    ]
    argv = words(venvs._resolve(SOURCE, "0.5.16.dev20260720+g8905cbd42", "/b"))
    compile_ = argv[argv.index("compile") :]
    assert "unsafe-best-match" not in argv and "--extra-index-url" not in compile_
    assert compile_[compile_.index("--index-strategy") + 1] == "first-index"
    assert compile_[compile_.index("--index-url") + 1] == "https://pypi.org/simple"
    assert "tok" not in " ".join(argv)


def test_one_index_resolves_everything_from_it():
    plain = venvs.Source(index_url="http://10.200.0.1:8100/simple/", installer="uv", index_packages=("sglang",))
    pyproject = tomllib.loads(plain.resolve_pyproject("1.0"))
    assert pyproject["project"]["dependencies"] == ["sglang==1.0"]
    assert "tool" not in pyproject


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_resolve_and_install_take_wheels_only_but_the_allowed_sdists(installer):
    source = venvs.Source(
        index_url="https://pypi.org/simple", installer=installer, sdist_allowed=("pycountry",), uv_sha256=("a" * 64,)
    )
    for argv in (words(venvs._resolve(source, "1.0", "/b")), words(venvs._install(source, "/b"))):
        assert re.search(r"--only-binary :all: --no-binary pycountry( |$)", " ".join(argv)), argv


def test_install_from_the_lock_requires_hashes_and_resolves_nothing():
    argv = words(venvs._install(SOURCE, "/b"))
    assert {"--require-hashes", "--no-deps", "--only-binary"} <= set(argv)


def test_pip_with_an_extra_index_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as raised:
        load(sglang_installer="pip", sglang_extra_index_urls=[SGLANG_INDEX])
    assert "sglang_installer" in str(raised.value) and "merges every index" in str(raised.value)


def test_another_uv_version_needs_its_own_sha256():
    with pytest.raises(ConfigError, match="uv_sha256"):
        load(uv_version="0.14.0")
    assert load(uv_version="0.14.0", uv_sha256=["b" * 64]).data.uv_sha256 == ["b" * 64]


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"uv_sha256": ["not-hex"]}, "uv_sha256"),
        ({"uv_sha256": []}, "uv_sha256"),
        ({"sglang_sdist_allowed": ["-e ."]}, "sglang_sdist_allowed"),
        ({"sglang_index_packages": ["sglang --index-url=http://evil"]}, "sglang_index_packages"),
        ({"sglang_index_packages": []}, "sglang_index_packages"),
        ({"sglang_extra_index_urls": [SGLANG_INDEX, "https://two.example/simple"]}, "sglang_extra_index_urls"),
    ],
)
def test_supply_values_are_validated(changes, key):
    with pytest.raises(ConfigError) as raised:
        load(**changes)
    assert key in str(raised.value)


def test_the_default_resolves_sglang_and_its_kernel_from_sglangs_index():
    data = load().data
    assert data.sglang_index_packages == ["sglang", "sgl-kernel"] and data.sglang_extra_index_urls == [SGLANG_INDEX]
    assert data.sglang_sdist_allowed == []
