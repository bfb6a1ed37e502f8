"""Fixtures shared by the agent's unit tests (their helpers: agent_support.py)."""

import pytest

from sglang_pve.tools import host_files
from tests.unit.agent_support import fake_systemctl, fake_systemd_run


@pytest.fixture(autouse=True)
def _host_data_in_the_project(monkeypatch):
    """The measurement tasks' host data under the project dir a test passes (host_files.py), not in
    the lab slot's directory that tests/lab/conftest.py sets for the whole worker."""
    monkeypatch.delenv(host_files.HOST_DATA_DIR, raising=False)


@pytest.fixture
def agent_env(monkeypatch, tmp_path):
    """Isolate the agent from this host's devices, nvidia-smi and systemd."""
    devices = tmp_path / "dev"
    devices.mkdir()
    monkeypatch.setenv("SGLANG_PVE_DEV_GLOB", f"{devices}/nvidia*")
    monkeypatch.setenv("SGLANG_PVE_NVIDIA_SMI", "")
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, {})))
    monkeypatch.setenv("SGLANG_PVE_SYSTEMD_RUN", str(fake_systemd_run(tmp_path)))
    monkeypatch.setenv("SGLANG_PVE_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("SGLANG_PVE_RELEASES_DIR", str(tmp_path / "releases"))
    (tmp_path / "node-exporter").mkdir()  # node_exporter's textfile directory (metrics.py)
    monkeypatch.setenv("SGLANG_PVE_TEXTFILE_DIR", str(tmp_path / "node-exporter"))
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    monkeypatch.delenv("SGLANG_PVE_UNIT", raising=False)
    return devices


@pytest.fixture
def lab_api_key(monkeypatch, tmp_path):
    """The api-key file `lab up` makes (lab.credentials.ensure_api_key), here in a temp dir: the
    lab's group data names it as the servers' api-key source, so loading that data reads it."""
    from lab import layout

    path = tmp_path / "lab-secrets" / "api-key"
    path.parent.mkdir(mode=0o700)
    path.write_text("lab-unit-test-key\n")
    path.chmod(0o600)
    monkeypatch.setattr(layout, "API_KEY", path)
    return path
