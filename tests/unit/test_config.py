"""Configuration model: what ships is valid, and bad input is refused with key, value and fix."""

import copy
from pathlib import Path

import pytest
import yaml

from sglang_pve.config import ConfigError, load_deployment
from tests.conftest import PROJECT, group_data

SERVERS = yaml.safe_load((PROJECT / "group_data" / "servers.yml").read_text())


def load(data_changes: dict | None = None, servers: dict | None = None, tmp_path: Path | None = None):
    data = group_data("all")
    data.update(data_changes or {})
    if servers is not None:
        (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
        data["servers_file"] = str(tmp_path / "servers.yml")
    return load_deployment("sglang1", data, PROJECT)


def test_shipped_configuration_is_valid():
    deployment = load()
    assert deployment.nccl_env == {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }
    assert set(deployment.servers) == {"baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step"}
    for steps in (2, 3, 5):
        flags = deployment.servers[f"eagle3-{steps}step"].args.as_flags()
        assert flags["speculative-algorithm"] == "EAGLE3"
        assert flags["speculative-eagle-topk"] == 1
        assert flags["speculative-num-draft-tokens"] == steps + 1
        assert flags["tp-size"] == 8 and flags["mem-fraction-static"] == 0.88 and flags["port"] == 8000
    assert "speculative-algorithm" not in deployment.servers["baseline"].args.as_flags()


def test_lab_data_is_valid(lab_api_key):
    deployment = load(group_data("lab"))
    assert deployment.servers["baseline"].lifecycle.stall_timeout_s.weights == 10
    assert deployment.data.unit_limits.memlock == "8M"
    # secure by default: the lab's servers get the api-key `lab up` made, read through the secret channel
    assert deployment.secrets.flags["api-key"].value == "lab-unit-test-key"
    assert not deployment.data.allow_unauthenticated


@pytest.mark.parametrize("profile", ["pcie-tuned", "p2p-disabled", "nccl-defaults"])
def test_every_shipped_profile_is_valid(profile):
    assert load({"nccl_profile": profile}).data.nccl_profile == profile


def _server(**flags):
    servers = copy.deepcopy(SERVERS)
    servers["servers"]["bad"] = flags
    return servers


# (description, data changes, servers document or None, key the message must name)
BAD_INPUTS = [
    ("unknown profile", {"nccl_profile": "fast"}, None, "nccl_profile"),
    (
        "unknown NCCL variable",
        {"nccl_profiles": {"p": {"NCCL_PROTOCOL": "LL"}}, "nccl_profile": "p"},
        None,
        "NCCL_PROTOCOL",
    ),
    ("bad NCCL_PROTO", {"nccl_profiles": {"p": {"NCCL_PROTO": "LL256"}}, "nccl_profile": "p"}, None, "NCCL_PROTO"),
    ("bad NCCL_ALGO", {"nccl_profiles": {"p": {"NCCL_ALGO": "Ringg"}}, "nccl_profile": "p"}, None, "NCCL_ALGO"),
    (
        "bad NCCL_P2P_LEVEL",
        {"nccl_profiles": {"p": {"NCCL_P2P_LEVEL": "FAR"}}, "nccl_profile": "p"},
        None,
        "NCCL_P2P_LEVEL",
    ),
    (
        "size with a unit",
        {"nccl_profiles": {"p": {"NCCL_BUFFSIZE": "16MB"}}, "nccl_profile": "p"},
        None,
        "NCCL_BUFFSIZE",
    ),
    ("bad NCCL_NTHREADS", {"nccl_profiles": {"p": {"NCCL_NTHREADS": 500}}, "nccl_profile": "p"}, None, "NCCL_NTHREADS"),
    ("version became a float", {"sglang_version": 0.5}, None, "sglang_version"),
    ("version not PEP 440", {"sglang_version": "latest"}, None, "sglang_version"),
    ("unknown active server", {"active_server": "eagle4"}, None, "active_server"),
    ("relative venvs dir", {"sglang_venvs_dir": "opt/sglang"}, None, "sglang_venvs_dir"),
    ("index URL not http", {"sglang_index_url": "ftp://mirror/simple"}, None, "sglang_index_url"),
    ("bad nofile limit", {"unit_limits": {"nofile": "lots"}}, None, "unit_limits.nofile"),
    ("unknown flag", None, _server(**{"model-path": "/m", "tp-sise": 8}), "servers.bad.tp-sise"),
    ("prefix of a flag", None, _server(**{"model-path": "/m", "speculative-num-step": 3}), "speculative-num-step"),
    ("underscore flag name", None, _server(**{"model-path": "/m", "tp_size": 8}), "servers.bad.tp_size"),
    ("flag of wrong type", None, _server(**{"model-path": "/m", "tp-size": "eight"}), "servers.bad.tp-size"),
    (
        "mem fraction out of range",
        None,
        _server(**{"model-path": "/m", "mem-fraction-static": 1.5}),
        "mem-fraction-static",
    ),
    ("port out of range", None, _server(**{"model-path": "/m", "port": 70000}), "servers.bad.port"),
    ("deprecated alias", None, _server(**{"model-path": "/m", "cuda-graph-max-bs": 16}), "cuda-graph-max-bs"),
    ("api key in config", None, _server(**{"model-path": "/m", "api-key": "sk-123"}), "api-key"),
    (
        "partial speculative numbers",
        None,
        _server(
            **{
                "model-path": "/m",
                "speculative-algorithm": "EAGLE3",
                "speculative-draft-model-path": "/d",
                "speculative-num-steps": 3,
            }
        ),
        "speculative-eagle-topk",
    ),
    (
        "topk 1 with wrong draft tokens",
        None,
        _server(
            **{
                "model-path": "/m",
                "speculative-algorithm": "EAGLE3",
                "speculative-draft-model-path": "/d",
                "speculative-num-steps": 3,
                "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 5,
            }
        ),
        "speculative-num-draft-tokens",
    ),
    (
        "EAGLE3 without a draft",
        None,
        _server(
            **{
                "model-path": "/m",
                "speculative-algorithm": "EAGLE3",
                "speculative-num-steps": 3,
                "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 4,
            }
        ),
        "speculative-draft-model-path",
    ),
    (
        "unknown speculative algorithm",
        None,
        _server(**{"model-path": "/m", "speculative-algorithm": "MEDUSA"}),
        "speculative-algorithm",
    ),
    (
        "server name unusable in a unit",
        None,
        {"servers": {"Eagle 3/step": {"model-path": "/m"}}},
        "servers.Eagle 3/step",
    ),
    (
        "NCCL variable in server env",
        None,
        _server(**{"model-path": "/m", "env": {"NCCL_PROTO": "LL"}}),
        "servers.bad.env.NCCL_PROTO",
    ),
    (
        "unknown lifecycle key",
        None,
        _server(**{"model-path": "/m", "lifecycle": {"startup_timeout": 60}}),
        "lifecycle.startup_timeout",
    ),
    (
        "negative stall timeout",
        None,
        _server(**{"model-path": "/m", "lifecycle": {"stall_timeout_s": {"weights": -1}}}),
        "lifecycle.stall_timeout_s.weights",
    ),
    (
        "log level hiding the phase lines",
        None,
        _server(**{"model-path": "/m", "log-level": "warning"}),
        "servers.bad.log-level",
    ),
    ("multi-node", None, _server(**{"model-path": "/m", "nnodes": 2, "node-rank": 0}), "servers.bad.nnodes"),
    ("missing model path", None, {"servers": {"bad": {"tp-size": 8}}}, "servers.bad.model-path"),
    ("no servers at all", None, {"defaults": {}}, "servers_file"),
]


@pytest.mark.parametrize("description, changes, servers, key", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_refused_naming_the_key(tmp_path, description, changes, servers, key):
    with pytest.raises(ConfigError) as caught:
        load(changes, servers, tmp_path)
    message = str(caught.value)
    assert key in message, message
    assert message.count("sglang1:") >= 1 and "Fix:" in message


def test_every_problem_is_reported_at_once(tmp_path):
    servers = _server(**{"model-path": "/m", "tp-size": 0, "port": 0})
    with pytest.raises(ConfigError) as caught:
        load({"nccl_profile": "pcie-tuned"}, servers, tmp_path)
    keys = {p.key for p in caught.value.problems}
    assert {"servers.bad.tp-size", "servers.bad.port"} <= keys


def test_did_you_mean_for_typos(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(None, _server(**{"model-path": "/m", "speculative-num-step": 3}), tmp_path)
    assert "did you mean speculative-num-steps?" in str(caught.value)


def test_yaml_syntax_error_is_reported_with_position(tmp_path):
    (tmp_path / "servers.yml").write_text("servers:\n  baseline: {model-path: /m\n")
    data = group_data("all") | {"servers_file": str(tmp_path / "servers.yml")}
    with pytest.raises(ConfigError) as caught:
        load_deployment("sglang1", data, PROJECT)
    assert "not valid YAML" in str(caught.value) and "line" in str(caught.value)


def test_the_servers_file_is_parsed_once_per_text_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    """A run validates every host's data several times against one servers file: it is parsed once
    while its text is unchanged; a caller that changes what it got changes no other caller's."""
    from sglang_pve.config import servers

    parsed, safe_load = [], yaml.safe_load
    monkeypatch.setattr(yaml, "safe_load", lambda text: parsed.append(text) or safe_load(text))
    path = tmp_path / "servers.yml"
    path.write_text("servers:\n  a: {mem-fraction-static: 0.8}\n")
    first, problems = servers.read_servers_file(path)
    assert problems == [] and first == {"servers": {"a": {"mem-fraction-static": 0.8}}}
    first["servers"]["a"]["mem-fraction-static"] = 0.1
    second, _ = servers.read_servers_file(path)
    assert second["servers"]["a"]["mem-fraction-static"] == 0.8 and len(parsed) == 1
    path.write_text("servers:\n  a: {mem-fraction-static: 0.7}\n")  # same size, maybe the same mtime
    third, _ = servers.read_servers_file(path)
    assert third["servers"]["a"]["mem-fraction-static"] == 0.7 and len(parsed) == 2
