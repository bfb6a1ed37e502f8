"""The supply chain's data: the pinned uv, package names, which index each distribution comes from.

    UV_PIN.version, UV_PIN.sha256   # from uv-requirement.txt beside this file (the one source of the pin)
    PackageName                     # a PEP 508 project name, e.g. "sgl-kernel"
    supply_problems(data)           # the rules across keys (HostData fields below)

What it protects against (the README's "Supply chain" says what the lock does not): uv
installed from a requirement with hashes; the packages of SGLang's own index resolved from that
index only (an explicit index, uv's [tool.uv.sources]), every other one from sglang_index_url only:
no merged best match lets a higher version planted on one index win; wheels only, with the
sdists data names (sglang_sdist_allowed) built from source.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from sglang_pve.config.errors import Problem

_PIN_FILE = Path(__file__).with_name("uv-requirement.txt")
_PIN = re.compile(r"uv==(?P<version>[A-Za-z0-9.+!_-]+)(?P<hashes>( --hash=sha256:[0-9a-f]{64})+)")
SHA256 = r"^[0-9a-f]{64}$"
# PEP 508 names (packaging.utils' _validate_name): letters, digits, . _ -, alphanumeric at both ends
PackageName = Annotated[str, Field(pattern=r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]{0,126}[A-Za-z0-9])$")]


@dataclass(frozen=True)
class UvPin:
    version: str
    sha256: tuple[str, ...]


def read_pin(text: str) -> UvPin:
    """The uv pin from uv-requirement.txt's one requirement line (comments aside).

    >>> read_pin("# c\\nuv==1.2.3 --hash=sha256:" + "a" * 64 + "\\n")
    UvPin(version='1.2.3', sha256=('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',))
    """
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    found = _PIN.fullmatch(lines[0].strip()) if len(lines) == 1 else None
    if not found:
        raise ValueError(f"{_PIN_FILE}: expected one line `uv==VERSION --hash=sha256:HEX ...`")
    return UvPin(found["version"], tuple(found["hashes"].split(" --hash=sha256:")[1:]))


UV_PIN = read_pin(_PIN_FILE.read_text())


def normalized(name: str) -> str:
    """PEP 503 normalization: how indexes and installers compare names ("SGL_Kernel" is "sgl-kernel")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def supply_problems(data: Any) -> list[Problem]:
    """The supply-chain rules across keys of HostData (`data`), every one at once."""
    problems = []
    if data.uv_version != UV_PIN.version and list(data.uv_sha256) == list(UV_PIN.sha256):
        problems.append(
            Problem(
                "uv_sha256",
                "(the pinned uv's)",
                f"are the sha256 of uv {UV_PIN.version}'s wheels, not of uv_version {data.uv_version}'s",
                f"give the sha256 of uv {data.uv_version}'s wheels for your hosts' platforms (PyPI's file list)",
            )
        )
    extra = data.sglang_extra_index_urls
    if data.sglang_installer == "pip" and extra:
        problems.append(
            Problem(
                "sglang_installer",
                "pip",
                "pip merges every index (--extra-index-url): a higher version of any name planted on one wins",
                "use sglang_installer: uv (each package from the index named for it), or one index "
                "(a proxy that serves SGLang's packages under their names) with no sglang_extra_index_urls",
            )
        )
    if len(extra) > 1:
        problems.append(
            Problem(
                "sglang_extra_index_urls",
                f"{len(extra)} indexes",
                "at most one: sglang_index_packages come from it, everything else from sglang_index_url",
                "keep SGLang's index; serve other packages through sglang_index_url",
            )
        )
    if extra and not data.sglang_index_packages:
        problems.append(
            Problem(
                "sglang_index_packages",
                "[]",
                "an extra index that serves no package is never read",
                'name the packages it serves, e.g. ["sglang", "sgl-kernel"], or drop sglang_extra_index_urls',
            )
        )
    return problems
