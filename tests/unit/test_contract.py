"""One contract between the deploy and the agent: what the deploy renders, the agent reads back
unchanged, for every shipped configuration (production and lab data) and the edge cases."""

import dataclasses
import json
import re

import pytest
import yaml

from sglang_pve.agent import contract, phases, spec
from sglang_pve.agent.gpus import DeviceNode
from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.config.lifecycle import Lifecycle
from sglang_pve.config.secrets import Secret
from sglang_pve.deploy import paths, render
from sglang_pve.deploy.facts.gpu import GpuDeviceInfo
from sglang_pve.deploy.render import lifecycle_spec, server_files
from sglang_pve.provision.node_prep import node_prep_files
from tests.conftest import PROJECT, group_data

DATA = {"production": ("all",), "lab": ("all", "lab")}


def rendered(deployment, name: str) -> dict:
    return {f.path: f.content for f in server_files(deployment, deployment.servers[name], "/opt/venv")}


@pytest.mark.parametrize("data", DATA)
def test_every_shipped_configuration_renders_a_spec_the_agent_reads_back(data, lab_api_key):
    deployment = load_deployment("h", group_data(*DATA[data]), PROJECT)
    assert deployment.servers
    for name, server in deployment.servers.items():
        files = rendered(deployment, name)
        path = paths.lifecycle_path(name)
        read = spec.parse(json.loads(files[path]), path)
        assert read == lifecycle_spec(server)
        assert spec.to_json(read) == files[path]
        life = server.lifecycle.model_dump()
        assert {k: getattr(read, k) for k in ("startup_timeout_s", "gpu_free_timeout_s", "gpu_idle_mib")} == {
            k: life[k] for k in ("startup_timeout_s", "gpu_free_timeout_s", "gpu_idle_mib")
        }
        assert dataclasses.asdict(read.watchdog) == life["watchdog"]
        assert dataclasses.asdict(read.stall_timeout_s) == life["stall_timeout_s"]
        assert (read.unit, read.log, read.port) == (contract.unit_name(name), contract.log_path(name), 8000)
        unit = files[paths.unit_path(name)]
        for command in ("prestart", "gate", "poststop"):
            assert f"{contract.TARGET_PYTHON} -I {contract.AGENT} {command} --spec {path}" in unit
        if deployment.secrets.flags:  # the lab's api-key: the root-only copy, loaded as a credential
            assert f"--config %d/{name}.yaml" in unit and f"LoadCredential={name}.yaml:" in unit
        else:
            assert f"--config {contract.server_config_path(name)}" in unit


def test_every_file_written_whole_carries_the_contracts_marker_first():
    """The servers fact and the unit operation leave alone what lacks contract.MARKER; JSON (the
    lifecycle spec) has no comments and a .pth line is code: those two carry no marker."""
    deployment = load_deployment("h", group_data("all"), PROJECT)
    gpus = GpuDeviceInfo({}, [DeviceNode("/dev/nvidia0", 195, 0)], None)
    written = render.nccl_files(deployment, "/opt/venv/site") + [render.logrotate_file()] + node_prep_files(gpus)
    for server in deployment.servers.values():
        written += server_files(deployment, server, "/opt/venv")
    secret = Secret("canary", "test")
    files = {f.path: f.content for f in written if not f.path.endswith((".lifecycle.json", ".pth"))}
    files["env"] = render.secret_env_text({"HF_TOKEN": secret})
    files["yaml"] = render.server_yaml(server, {"api-key": secret})
    assert len(files) >= 9
    assert {p for p, c in files.items() if not c.startswith(f"# {contract.MARKER}: ")} == set()


@pytest.mark.parametrize(
    "bind, probed", [("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("10.1.2.3", "10.1.2.3"), (None, "127.0.0.1")]
)
def test_the_probe_address_follows_the_bind_address(tmp_path, bind, probed):
    server = {"model-path": "/m"} | ({"host": bind} if bind else {})
    (tmp_path / "servers.yml").write_text(yaml.safe_dump({"servers": {"one": server}}))
    deployment = load_deployment(
        "h", group_data("all") | {"servers_file": str(tmp_path / "servers.yml"), "active_server": None}, PROJECT
    )
    read = spec.parse(json.loads(rendered(deployment, "one")[paths.lifecycle_path("one")]))
    assert read.host == probed and read.port == paths.SGLANG_DEFAULT_PORT


def test_the_deploy_model_is_the_agent_schema():
    assert Lifecycle().model_dump() == dataclasses.asdict(spec.Lifecycle())
    assert phases.PHASES == ("launch", *spec.STALL_PHASES, "ready")
    assert set(Lifecycle.model_fields["stall_timeout_s"].annotation.model_fields) == set(spec.STALL_PHASES)
    documented = json.loads(re.search(r"```json\n(.*?)```", spec.__doc__, re.S).group(1))
    assert set(documented) == {f.name for f in spec.file_fields(spec.Spec)}


@pytest.mark.parametrize("name", ["Upper", "dot.ted", "-lead", "x" * 49, "a/b"])
def test_one_server_name_alphabet(tmp_path, name):
    (tmp_path / "servers.yml").write_text(yaml.safe_dump({"servers": {name: {"model-path": "/m"}}}))
    with pytest.raises(ConfigError, match=re.escape(contract.SERVER_NAME_RULE)):
        load_deployment(
            "h", group_data("all") | {"servers_file": str(tmp_path / "servers.yml"), "active_server": None}, PROJECT
        )
    good = spec.to_json(lifecycle_spec_of_default())
    with pytest.raises(spec.SpecError, match="key 'server'"):
        spec.parse(json.loads(good) | {"server": name})


def lifecycle_spec_of_default():
    deployment = load_deployment("h", group_data("all"), PROJECT)
    return lifecycle_spec(deployment.servers["baseline"])
