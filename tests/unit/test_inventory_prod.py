"""inventory/prod.py as a new user meets it: what is missing is said at once, with what to set."""

import os
import subprocess

from tests.conftest import PROJECT

PYINFRA = str(PROJECT / ".venv" / "bin" / "pyinfra")


def run_dry(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PVE_", "PVE_"))}
    return subprocess.run(
        [PYINFRA, "inventory/prod.py", "deploy.py", "--dry"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean | env | {"HOME": env.get("HOME", "/nonexistent")},
    )


def test_missing_key_known_hosts_and_secrets_are_listed_not_a_traceback(tmp_path):
    result = run_dry({"HOME": str(tmp_path)})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert "inventory/prod.py cannot be used yet (4 problem(s))" in output
    for variable in ("SGLANG_PVE_SSH_KEY", "SGLANG_PVE_KNOWN_HOSTS", "PVE_PASSWORD_FILE", "PVE_FINGERPRINT"):
        assert f"export {variable}=" in output, output
