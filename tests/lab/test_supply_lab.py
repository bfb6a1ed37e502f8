"""Each distribution from the index named for it, with the real uv the deploy pins (issue 16, 5):
two file:// indexes on the target, one playing PyPI (a higher sgl-kernel and sglang planted on it),
one SGLang's (an older torchx on it); the venv op's own resolve and install commands
(venvs._resolve, venvs._install) with the uv the deploy installed from its hashed requirement."""

import pytest
from pyinfra.api import StringCommand

from sglang_pve.config.supply import UV_PIN
from sglang_pve.deploy import paths
from sglang_pve.deploy.operations import venvs
from tests.lab.conftest import on_target_python, pyinfra, sh

pytestmark = pytest.mark.lab

ROOT = "/tmp/sglang-pve-supply"
# wheels written by hand (stdlib only on the target): each module says which index it came from
INDEXES = r"""
import base64, hashlib, os, shutil, sys, zipfile
root = sys.argv[1]
shutil.rmtree(root, ignore_errors=True)
def wheel(index, name, version, deps=()):
    project = name.replace("_", "-")
    folder = f"{root}/{index}/{project}"
    os.makedirs(folder, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}_mod/__init__.py": f"INDEX = {index!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {d}\n" for d in deps),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    digest = lambda text: base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")
    record = "".join(f"{k},sha256={digest(v)},{len(v)}\n" for k, v in files.items())
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    path = f"{folder}/{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for key, value in files.items():
            archive.writestr(key, value)
for index, name, version, deps in [
    ("default", "sglang", "1.0", ["sgl-kernel", "torchx"]), ("default", "sglang", "9.0", []),
    ("default", "sgl_kernel", "9.0", []), ("default", "torchx", "2.0", []),
    ("sglang", "sglang", "1.0", ["sgl-kernel", "torchx"]), ("sglang", "sgl_kernel", "1.0", []),
    ("sglang", "torchx", "1.0", []),
]:
    wheel(index, name, version, deps)
for index in ("default", "sglang"):
    for project in os.listdir(f"{root}/{index}"):
        folder = f"{root}/{index}/{project}"
        links = "".join(
            f'<a href="{f}#sha256={hashlib.sha256(open(f"{folder}/{f}", "rb").read()).hexdigest()}">{f}</a>\n'
            for f in sorted(os.listdir(folder)) if f.endswith(".whl")
        )
        open(f"{folder}/index.html", "w").write(f"<html><body>{links}</body></html>\n")
"""
WHERE = "import sglang_mod, sgl_kernel_mod, torchx_mod; print(sglang_mod.INDEX, sgl_kernel_mod.INDEX, torchx_mod.INDEX)"


def test_sglangs_packages_come_only_from_sglangs_index_the_rest_only_from_the_default(lab):
    pyinfra()  # the deploy installs uv from its hashed requirement
    assert sh(f"{paths.UV_VENV}/bin/uv --version").split()[1] == UV_PIN.version
    on_target_python(INDEXES, ROOT)
    source = venvs.Source(
        index_url=f"file://{ROOT}/default",
        extra_index_urls=(f"file://{ROOT}/sglang",),
        installer="uv",
        index_packages=("sglang", "sgl-kernel"),
    )
    build = f"{ROOT}/venv"
    resolve = StringCommand(*venvs._resolve(source, "1.0", build)).get_raw_value()
    install = StringCommand(*venvs._install(source, build)).get_raw_value()
    sh(f"python3 -m venv {build} && export UV_NO_CACHE=1 && {resolve} && {install}")  # install opens with a subshell
    lock = sh(f"cat {build}/{venvs.LOCK_IN_BUILD}")
    # not the higher sgl-kernel 9.0 planted on the default index, not SGLang's older torchx
    assert "sgl-kernel==1.0" in lock and "sglang==1.0" in lock and "torchx==2.0" in lock, lock
    assert sh(f"{build}/bin/python -c '{WHERE}'").split() == ["sglang", "sglang", "default"]
    sh(f"rm -rf {ROOT}")
