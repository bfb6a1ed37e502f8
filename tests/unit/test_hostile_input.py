"""Hostile input: each value in each field is refused naming the key, or rendered so that reading
it back yields exactly the value (the lab repeats the unit read-back with systemd's own parser)."""

import ast
import re
import shlex

import pytest
import yaml

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.deploy import render
from sglang_pve.deploy.render import nccl_block, nccl_files, server_files
from tests.conftest import PROJECT
from tests.hostile import FIELDS, VALUES, data_for, systemd_words

CASES = [(field, value) for field in FIELDS for value in VALUES]
DIRECTIVE = re.compile(r"^([A-Za-z]+)=")


def _directives(unit: str) -> list[str]:
    """Every non-comment line of a unit reduced to its section header or directive name."""
    found = []
    for line in unit.splitlines():
        if not line or line.startswith("#"):
            continue
        match = DIRECTIVE.match(line)
        assert match or re.fullmatch(r"\[[A-Za-z]+\]", line), f"stray line {line!r}"
        found.append(match.group(1) if match else line)
    return found


def unit_environment(unit: str) -> dict[str, str]:
    """The server's environment as systemd and env(1) build it: the unit's Environment= lines, then
    the NAME=VALUE words of ExecStart=/usr/bin/env ... (specifiers and $ unescaped as systemd does)."""
    environment = {}
    for line in unit.splitlines():
        if line.startswith("Environment="):
            for word in systemd_words(line.removeprefix("Environment=").replace("%%", "%")):
                name, _, value = word.partition("=")
                environment[name] = value
    environment.update(exec_start_environment(unit))
    return environment


def exec_start_environment(unit: str) -> dict[str, str]:
    """What env(1) at the head of ExecStart= sets for the server alone."""
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    words = [w.replace("%%", "%").replace("$$", "$") for w in systemd_words(line.removeprefix("ExecStart="))]
    if words[0] != "/usr/bin/env":
        return {}
    assignments = words[1 : next(i for i, w in enumerate(words) if i and "=" not in w)]
    return dict(word.split("=", 1) for word in assignments)


def _check_round_trip(deployment):
    baseline = _directives((render.TEMPLATES / "sglang-server.service.j2").read_text().split("{% if")[0] + "[Service]")
    for server in deployment.servers.values():
        unit, config, _ = (f.content for f in server_files(deployment, server, "/opt/sglang/venvs/x"))
        directives = _directives(unit)
        assert directives[: len(baseline) - 1] == baseline[:-1] or directives[0] == "[Unit]"
        assert directives.count("ExecStartPre") == 1 and directives.count("ExecStart") == 1
        plain = server_files(
            deployment, type(server)(server.name, server.args, {}, server.lifecycle), "/opt/sglang/venvs/x"
        )[0]
        assert directives.count("Environment") == _directives(plain.content).count("Environment")  # env: not there
        assert set(exec_start_environment(unit)) == set(exec_start_environment(plain.content)) | set(server.env)
        environment = unit_environment(unit)
        assert len(environment) == len(unit_environment(plain.content)) + len(
            server.env
        )  # nothing split, nothing added
        assert {k: environment[k] for k in server.env} == server.env
        assert yaml.safe_load(config) == server.args.as_flags()
    env_file, conf, hook, pth = (f.content for f in nccl_files(deployment, "/site"))
    assert [line.split("=", 1) for line in env_file.splitlines() if not line.startswith("#")] == [
        list(i) for i in deployment.nccl_env.items()
    ]
    tree = ast.parse(hook)
    assert [type(node).__name__ for node in tree.body] == ["Import", "Assign", "For"]
    assert ast.literal_eval(tree.body[1].value) == deployment.nccl_env
    exports = [shlex.split(line)[1] for line in nccl_block(deployment).splitlines() if not line.startswith("#")]
    assert exports == [f"{k}={v}" for k, v in deployment.nccl_env.items()]


def test_at_least_forty_hostile_values_in_every_field():
    assert len(VALUES) >= 40 and len(FIELDS) >= 15


@pytest.mark.parametrize("field, value", CASES, ids=[f"{f}-{i}" for f in FIELDS for i in range(len(VALUES))])
def test_refused_naming_the_key_or_read_back_exactly(tmp_path, field, value):
    data = data_for(field, value, tmp_path)
    try:
        deployment = load_deployment("sglang1", data, PROJECT)
    except ConfigError as error:
        message = str(error)
        assert FIELDS[field][1] in message, message
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]", message), "control characters echoed raw"
        assert "\n  - " in message and "Fix:" in message
        return
    _check_round_trip(deployment)


def test_quotes_percent_and_dollar_in_env_are_accepted_and_escaped(tmp_path):
    deployment = load_deployment("sglang1", data_for("env value", 'say "hi" 100% $HOME', tmp_path), PROJECT)
    unit = server_files(deployment, deployment.servers["baseline"], "/v")[0].content
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart=/usr/bin/env "))
    assert ' "SGLANG_FOO=say \\"hi\\" 100%% $$HOME" ' in exec_start  # no specifier, no variable expansion
    assert exec_start_environment(unit)["SGLANG_FOO"] == 'say "hi" 100% $HOME'


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PATH",
        "BASH_ENV",
        "SGLANG_PVE_PROC",
        "SGLANG_PVE_NVIDIA_SMI",
        "NCCL_NET_PLUGIN",
    ],
)
def test_loader_and_toolkit_variables_are_refused_in_env(tmp_path, name):
    with pytest.raises(ConfigError) as caught:
        load_deployment("sglang1", data_for("env name", name, tmp_path), PROJECT)
    assert f"env.{name}" in str(caught.value)


def test_a_loader_variable_named_in_allow_env_is_accepted(tmp_path):
    data = data_for("env name", "LD_LIBRARY_PATH", tmp_path)
    servers = yaml.safe_load(open(data["servers_file"]))
    servers["servers"]["baseline"]["allow_env"] = ["LD_LIBRARY_PATH"]
    open(data["servers_file"], "w").write(yaml.safe_dump(servers))
    assert load_deployment("sglang1", data, PROJECT).servers["baseline"].env == {"LD_LIBRARY_PATH": "1"}


@pytest.mark.parametrize(
    "name, flags",
    [
        ("HF_TOKEN", {"env": {"HF_TOKEN": "hf_canary_9f8e7d"}}),
        ("api-key", {"api-key": "hf_canary_9f8e7d"}),
        ("admin-api-key", {"admin-api-key": "hf_canary_9f8e7d"}),
    ],
)
def test_a_refused_secret_is_never_echoed(tmp_path, name, flags):
    data = data_for("chat-template", "x", tmp_path)
    servers = yaml.safe_load(open(data["servers_file"]))
    servers["servers"]["baseline"] = flags
    open(data["servers_file"], "w").write(yaml.safe_dump(servers))
    with pytest.raises(ConfigError) as caught:
        load_deployment("sglang1", data, PROJECT)
    assert name in str(caught.value) and "hf_canary_9f8e7d" not in str(caught.value)
