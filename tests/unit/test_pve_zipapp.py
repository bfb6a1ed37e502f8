"""The emulator runs without the repository and without site-packages: as a zipapp and as a
copied package, on the stdlib alone."""

import shutil
import subprocess
import sys

from lab.pve import zipapp


def test_zipapp_runs_on_the_stdlib_alone(tmp_path):
    pyz = tmp_path / "pve-emulator.pyz"
    pyz.write_bytes(zipapp.build())
    assert zipapp.build() == pyz.read_bytes()  # deterministic: a redeploy is a no-op
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(pyz), "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert "--version" in out.stdout


def test_copied_package_runs(tmp_path):
    shutil.copytree(zipapp.PACKAGE_DIR, tmp_path / "pve", ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "import sys; sys.path.insert(0, '.'); import pve.server, pve.api_lxc, pve.api_snapshot, pve.api_node; "
        "print(sorted(pve.routes.ROUTES)[0])"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert out.stdout.startswith("('DELETE',")
