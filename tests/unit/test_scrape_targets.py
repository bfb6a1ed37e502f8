"""file_sd targets of a host (sglang_pve/deploy/scrape_targets.py)."""

import json
import subprocess

import pydantic
import pytest

from sglang_pve.config.deployment import HostData
from sglang_pve.deploy.scrape_targets import targets
from tests.unit.test_alerts import PROMTOOL


def test_node_exporter_each_server_with_metrics_and_each_router():
    servers = {"baseline": (8000, True), "eagle3": (8000, True), "big": (None, True), "quiet": (8001, False)}
    groups = targets("sglang1", "10.0.0.11", servers, {"kimi": 29000})
    assert groups == [
        {"targets": ["10.0.0.11:9100"], "labels": {"job": "node", "host": "sglang1"}},
        {"targets": ["10.0.0.11:8000"], "labels": {"job": "sglang", "host": "sglang1"}},  # two take turns on it
        {"targets": ["10.0.0.11:30000"], "labels": {"job": "sglang", "host": "sglang1", "server": "big"}},
        {"targets": ["10.0.0.11:29000"], "labels": {"job": "sglang-router", "host": "sglang1", "replica_set": "kimi"}},
    ]


def test_an_ipv6_address_is_bracketed():
    assert targets("h", "fd00::5", {}, {})[0]["targets"] == ["[fd00::5]:9100"]


def check_config(tmp_path, groups) -> subprocess.CompletedProcess[str]:
    """promtool check config reads the file_sd files its config names and checks every target and label."""
    (tmp_path / "targets.json").write_text(json.dumps(groups))
    config = {"scrape_configs": [{"job_name": "all", "file_sd_configs": [{"files": [str(tmp_path / "*.json")]}]}]}
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    command = [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: apt-get install prometheus")
def test_prometheus_accepts_the_targets_as_file_sd(tmp_path):
    done = check_config(tmp_path, targets("sglang1", "fd00::5", {"b": (8000, True)}, {"kimi": 29000}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert check_config(tmp_path, [{"targets": ["a:1"], "labels": {"0bad": "x"}}]).returncode != 0


@pytest.mark.parametrize("value", ["file_sd", "/etc/prometheus/sd\n- job: evil", "/etc/../sd"])
def test_the_targets_directory_is_an_absolute_path_in_the_safe_alphabet(value):
    required = {"active_server": "baseline", "servers_file": "servers.yml"}
    with pytest.raises(pydantic.ValidationError) as caught:
        HostData.model_validate({**required, "scrape_targets_dir": value})
    assert [error["loc"] for error in caught.value.errors()] == [("scrape_targets_dir",)]
    assert HostData.model_validate({**required, "scrape_targets_dir": "/etc/prometheus/sd"}).scrape_targets_dir
