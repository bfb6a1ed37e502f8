"""Preflight: the shipped configurations pass on a Kimi-K2.5-shaped host, every bad one is refused
with server, key, values and fix, and the probe reads a real host in one command."""

import copy
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import yaml

from sglang_pve.agent import preflight_probe
from sglang_pve.config import load_deployment
from sglang_pve.deploy import paths, sandbox
from sglang_pve.deploy.facts.preflight import (
    Holder,
    HostSnapshot,
    Listener,
    ModelDir,
    PreflightProbe,
    ProbeSpec,
    RenderedConfig,
    Verdict,
)
from sglang_pve.deploy.preflight import check, merged, probe_spec
from sglang_pve.deploy.preflight.context_length import derived_context_length
from sglang_pve.deploy.preflight.draft import MLA_HEAD
from sglang_pve.deploy.preflight.host import with_given_gpus
from tests.conftest import PROJECT, group_data

TARGET_PATH, DRAFT_PATH = "/shared/models/Kimi-K2.5-INT4", "/data/models/Kimi-K2.5-eagle3"
VENV = "/opt/sglang/venvs/sglang-test"
PINNED = group_data("all")["sglang_version"]
EAGLE3 = ("eagle3-2step", "eagle3-3step", "eagle3-5step")
OPT_IN = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"

# Kimi-K2.5's shape (config.json of moonshotai/Kimi-K2.5, trimmed to what the rules read).
TARGET = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "vocab_size": 163840,
        "max_position_embeddings": 262144,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    },
}
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 7168,
    "target_hidden_size": 7168,
    "vocab_size": 163840,
    "draft_vocab_size": None,
    "tie_word_embeddings": False,
    "num_hidden_layers": 1,
    "max_position_embeddings": 131072,
    "rope_scaling": None,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
}
SHIPPED = yaml.safe_load((PROJECT / "group_data" / "servers.yml").read_text())
DELETE = object()


def draft(**changes) -> dict:
    config = copy.deepcopy(DRAFT)
    for key, value in changes.items():
        if value is DELETE:
            del config[key]
        else:
            config[key] = value
    return config


def seed(**changes) -> dict:
    """The seed's servers: the EAGLE-3 configs without the context-length cap."""
    servers = copy.deepcopy(SHIPPED)
    for name in EAGLE3:
        del servers["servers"][name]["context-length"]
        servers["servers"][name].update(changes)
    return servers


def with_server(name: str, **flags) -> dict:
    servers = copy.deepcopy(SHIPPED)
    servers["servers"][name] = flags
    return servers


def snapshot(target=TARGET, draft_config=DRAFT, models=None, **changes) -> HostSnapshot:
    """A production host: 8 GPUs, nothing on the port, PID 1 may raise limits, SGLang not installed."""
    found = {TARGET_PATH: ModelDir(True, target, None), DRAFT_PATH: ModelDir(True, draft_config, None)}
    found.update(models or {})
    fields = dict(
        models=found,
        gpus=[f"nvidia{i}" for i in range(8)],
        cap_sys_resource=True,
        init_userns=True,
        limits={"nofile": (1048576, 1048576), "memlock": (None, None)},
        python=("/usr/bin/python3", 3, 11, 2),
    )
    fields.update(changes)
    return HostSnapshot(**fields)


def key_file(tmp_path: Path) -> dict:
    """sglang_secrets naming a 0600 file that holds an API key."""
    path = tmp_path / "api-key"
    path.write_text("canary-key-4711\n")
    path.chmod(0o600)
    return {"api-key": {"file": str(path)}}


def judge(
    tmp_path: Path, servers: dict | None = None, data: dict | None = None, groups=("all",), host=None, spec_changes=None
):
    values = group_data(*groups)
    values["sglang_secrets"] = key_file(tmp_path)  # the shipped servers bind 0.0.0.0: a key is required
    values["server_clients"] = ["192.168.10.0/24"]  # ... and clients to serve (else a warning)
    values.update(data or {})
    if servers is not None:
        (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
        values["servers_file"] = str(tmp_path / "servers.yml")
    deployment = load_deployment("sglang1", values, PROJECT)
    spec = probe_spec(deployment, VENV, judge_all=True)
    spec.configs.update(spec_changes or {})
    return check(deployment, spec, host or snapshot())


def assert_refused(report, key: str, *words: str):
    assert report.problems, "expected a refusal"
    lines = [p.render("sglang1") for p in merged(report.problems)]
    matching = [line for line in lines if key in line.split(" = ")[0] and all(w in line for w in words)]
    assert matching, f"no problem with key {key!r} and {words}:\n" + "\n".join(lines)
    assert all(p.fix for p in report.problems)


def test_shipped_eagle3_configs_pass_on_kimi(tmp_path):
    report = judge(tmp_path)
    assert report.problems == [] and report.warnings == []
    assert "4 server configs" in report.summary() and "drafts of 3 configs fit their targets" in report.summary()
    assert "8 GPUs >= 8 needed" in report.summary() and "port 8000 free" in report.summary()


def test_a_host_that_runs_no_server_needs_no_gpu(tmp_path):
    """A router's host (active_server null) passes with no GPU; the same host running a server does not."""
    idle = judge(tmp_path, data={"active_server": None}, host=snapshot(gpus=[]))
    assert idle.problems == [] and "0 GPUs: none needed (no active_server)" in idle.summary()
    assert_refused(judge(tmp_path, host=snapshot(gpus=[])), "gpus", "no NVIDIA GPU device nodes")


def test_a_gpu_set_change_is_judged_against_the_gpus_the_container_will_have(tmp_path):
    """The node passes the new set before the container's operations run (deploys/full.py): a
    container that has 4 GPUs now and gets 8 in this run passes; one that has 8 and keeps 4 does not."""
    four, eight = [f"nvidia{i}" for i in range(4)], [f"nvidia{i}" for i in range(8)]
    assert_refused(judge(tmp_path, host=snapshot(gpus=four)), "tp-size", "needs 8 GPUs", "has 4")
    growing, note = with_given_gpus(snapshot(gpus=four), list(range(8)))
    assert judge(tmp_path, host=growing).problems == [] and note.endswith("(now: nvidia0 nvidia1 nvidia2 nvidia3)")
    shrinking, _ = with_given_gpus(snapshot(gpus=eight), [4, 5, 6, 7])
    assert_refused(
        judge(tmp_path, host=shrinking), "tp-size", "needs 8 GPUs", "has 4 (nvidia4 nvidia5 nvidia6 nvidia7)"
    )


def test_an_open_bind_without_a_key_is_refused_unless_allowed(tmp_path):
    assert_refused(
        judge(tmp_path, data={"sglang_secrets": {}}),
        "servers.{baseline,eagle3-2step,eagle3-3step,eagle3-5step}.host",
        "without an API key",
        "allow_unauthenticated",
    )
    allowed = judge(tmp_path, data={"sglang_secrets": {}, "allow_unauthenticated": True})
    assert allowed.problems == [] and {w.key for w in allowed.warnings} == {
        f"servers.{n}.host" for n in SHIPPED["servers"]
    }
    loopback = dict(SHIPPED, defaults=dict(SHIPPED["defaults"], host="127.0.0.1"))
    assert judge(tmp_path, loopback, data={"sglang_secrets": {}}).problems == []


def test_an_open_bind_without_clients_is_warned_about_not_a_loopback_one(tmp_path):
    report = judge(tmp_path, data={"server_clients": []})
    assert report.problems == [] and {w.key for w in report.warnings} == {
        f"servers.{n}.host" for n in SHIPPED["servers"]
    }
    assert all("server_clients" in w.fix for w in report.warnings)
    loopback = dict(SHIPPED, defaults=dict(SHIPPED["defaults"], host="127.0.0.1"))
    assert judge(tmp_path, loopback, data={"server_clients": []}).warnings == []


def test_running_as_root_is_possible_with_a_warning(tmp_path):
    report = judge(tmp_path, data={"server_user": "root"})
    assert report.problems == [] and [w.key for w in report.warnings] == ["server_user"]


def test_lab_data_passes_on_the_lab_host(tmp_path):
    lab = snapshot(cap_sys_resource=False, limits={"nofile": (20000, 20000), "memlock": (8388608, 8388608)})
    report = judge(tmp_path, groups=("all", "lab"), host=lab)
    assert report.problems == []
    assert "nofile 16384 <= 20000, memlock 8M <= 8388608" in report.summary()


def test_seed_context_mismatch_is_refused_with_both_numbers(tmp_path):
    report = judge(tmp_path, seed())
    assert_refused(report, "context-length", "262144", "131072", "context-length: 131072", OPT_IN)
    # one line for the three configs that share the draft
    assert [p.key for p in merged(report.problems)] == [
        "servers.{eagle3-2step,eagle3-3step,eagle3-5step}.context-length"
    ]
    assert "262144" in report.refusal("sglang1") and "131072" in report.refusal("sglang1")


def test_env_opt_in_passes_with_a_warning(tmp_path):
    report = judge(tmp_path, seed(env={OPT_IN: 1}))
    assert report.problems == []
    assert len(report.warnings) == 3 and all("131072" in w.message for w in report.warnings)


def test_rope_scaling_can_make_a_draft_long_enough(tmp_path):
    long_draft = draft(max_position_embeddings=65536, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    assert judge(tmp_path, seed(), host=snapshot(draft_config=long_draft)).problems == []


def test_top_level_aux_ids_only_warn(tmp_path):
    vllm_style = draft(eagle_config=DELETE, eagle_aux_hidden_state_layer_ids=[1, 29, 57])
    report = judge(tmp_path, host=snapshot(draft_config=vllm_style))
    assert report.problems == []
    assert len(merged(report.warnings)) == 1
    assert "[2, 30, 58]" in report.warnings[0].message and "eagle_config" in report.warnings[0].fix


BAD = {
    "unsupported draft architecture": (
        dict(host=snapshot(draft_config=draft(architectures=["Eagle3Speculator"]))),
        "speculative-draft-model-path",
        "'Eagle3Speculator'",
        "LlamaForCausalLMEagle3",
    ),
    "draft hidden size": (
        dict(host=snapshot(draft_config=draft(hidden_size=4096))),
        "speculative-draft-model-path",
        "4096",
        "7168",
    ),
    "draft target_hidden_size": (
        dict(host=snapshot(draft_config=draft(target_hidden_size=5120))),
        "speculative-draft-model-path",
        "5120",
    ),
    "draft vocab size": (
        dict(host=snapshot(draft_config=draft(vocab_size=32000))),
        "speculative-draft-model-path",
        "32000",
        "163840",
    ),
    "aux layer beyond the target": (
        dict(host=snapshot(draft_config=draft(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 61]}))),
        "speculative-draft-model-path",
        "[61]",
        "61 layers",
    ),
    "negative aux layer": (
        dict(host=snapshot(draft_config=draft(eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 29, 57]}))),
        "speculative-draft-model-path",
        "[-1]",
    ),
    "untied draft without draft_vocab_size": (
        dict(host=snapshot(draft_config=draft(draft_vocab_size=DELETE))),
        "speculative-draft-model-path",
        "draft_vocab_size",
    ),
    "MLA head with 2 layers": (
        dict(host=snapshot(draft_config=draft(architectures=[MLA_HEAD], num_hidden_layers=2, q_lora_rank=1536))),
        "speculative-draft-model-path",
        "num_hidden_layers is 2",
    ),
    "MLA head without q_lora_rank": (
        dict(host=snapshot(draft_config=draft(architectures=[MLA_HEAD], q_lora_rank=None))),
        "speculative-draft-model-path",
        "q_lora_rank",
    ),
    "MLA head on SGLang 0.5.10": (
        dict(
            data={"sglang_version": "0.5.10"},
            host=snapshot(draft_config=draft(architectures=[MLA_HEAD], q_lora_rank=1536)),
        ),
        "speculative-draft-model-path",
        "0.5.12",
        "0.5.10",
    ),
    "missing model directory": (
        dict(host=snapshot(models={TARGET_PATH: ModelDir(False, None, None)})),
        "model-path",
        TARGET_PATH,
        "no such directory",
    ),
    "draft directory without config.json": (
        dict(host=snapshot(models={DRAFT_PATH: ModelDir(True, None, "is missing")})),
        "speculative-draft-model-path",
        "config.json is missing",
    ),
    "draft config.json not JSON": (
        dict(host=snapshot(models={DRAFT_PATH: ModelDir(True, None, "is not valid JSON (Expecting value)")})),
        "speculative-draft-model-path",
        "not valid JSON",
    ),
    "hub id instead of a local model": (
        dict(
            servers=with_server("baseline", **{"model-path": "moonshotai/Kimi-K2.5"}),
            host=snapshot(models={"moonshotai/Kimi-K2.5": ModelDir(False, None, None)}),
        ),
        "servers.baseline.model-path",
        "Hugging Face Hub",
    ),
    "tp-size above the GPU count": (
        dict(host=snapshot(gpus=["nvidia0", "nvidia1", "nvidia2", "nvidia3"])),
        "tp-size",
        "needs 8 GPUs",
        "has 4",
    ),
    "no GPU device nodes": (dict(host=snapshot(gpus=[])), "gpus", "no NVIDIA GPU device nodes"),
    "port held by a foreign process": (
        dict(
            host=snapshot(
                listeners=[
                    Listener(8000, "0.0.0.0", (Holder(812, "nginx", "nginx: master process /usr/sbin/nginx", None),))
                ]
            )
        ),
        "servers.{baseline,eagle3-2step,eagle3-3step,eagle3-5step}.port",
        "0.0.0.0:8000",
        "pid 812 (nginx: master",
    ),
    "unit limits above PID 1's hard limits": (
        dict(host=snapshot(cap_sys_resource=False, limits={"nofile": (20000, 20000), "memlock": (8388608, 8388608)})),
        "unit_limits.nofile",
        "1048576",
        "20000",
        "205/LIMITS",
    ),
    "infinite memlock above the hard limit": (
        dict(host=snapshot(cap_sys_resource=False, limits={"nofile": (2097152, 2097152), "memlock": (65536, 65536)})),
        "unit_limits.memlock",
        "'infinity'",
        "65536",
    ),
    "unprivileged container": (
        dict(host=snapshot(init_userns=False, limits={"nofile": (524288, 524288), "memlock": (None, None)})),
        "unit_limits.nofile",
        "user namespace",
    ),
    "SGLang's parser rejects a flag": (
        dict(
            host=snapshot(
                sglang=PINNED,
                verdicts={"baseline": Verdict(False, "argument --reasoning-parser: invalid choice: 'kimi_k3'")},
            )
        ),
        "servers.baseline",
        "/etc/sglang/servers/baseline.yaml",
        "own parser rejects it",
        "kimi_k3",
    ),
    "context-length above the target's": (
        dict(servers=with_server("baseline", **{"model-path": TARGET_PATH, "context-length": 300000})),
        "servers.baseline.context-length",
        "300000",
        "262144",
    ),
    "rope factor ignored (original_max_position_embeddings)": (
        dict(
            servers=seed(),
            host=snapshot(
                draft_config=draft(
                    max_position_embeddings=65536,
                    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 65536},
                )
            ),
        ),
        "context-length",
        "262144",
        "65536",
    ),
    "rope factor ignored (llama3)": (
        dict(
            servers=seed(),
            host=snapshot(
                draft_config=draft(max_position_embeddings=32768, rope_scaling={"rope_type": "llama3", "factor": 8.0})
            ),
        ),
        "context-length",
        "262144",
        "32768",
    ),
    "probe failed": (
        dict(host=HostSnapshot(error="Traceback ...\nPermissionError: /proc/1/limits")),
        "preflight",
        "PermissionError",
    ),
    "python too old for the agent": (
        dict(host=snapshot(python=("/usr/bin/python3", 3, 9, 2))),
        "python",
        "3.9.2",
        ">= 3.11",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_configuration_is_refused(tmp_path, case):
    arguments, key, *words = BAD[case]
    assert_refused(judge(tmp_path, **arguments), key, *words)


def _rendered(text: str) -> RenderedConfig:
    return RenderedConfig("/etc/sglang/servers/eagle3-3step.yaml", text, hashlib.sha1(text.encode()).hexdigest(), {})


@pytest.mark.parametrize(
    "edit, key, fix",
    [
        (
            ("speculative-num-steps: 3", "speculative-num-step: 3"),
            "servers.eagle3-3step.speculative-num-step",
            "speculative-num-steps",
        ),
        (
            ("speculative-num-draft-tokens: 4", "speculative-num-draft-tokens: 6"),
            "servers.eagle3-3step.speculative-num-draft-tokens",
            "set it to 4",
        ),
    ],
)
def test_rendered_config_is_judged_by_the_config_model(tmp_path, edit, key, fix):
    values = group_data("all")
    text = probe_spec(load_deployment("sglang1", values, PROJECT), VENV, True).configs["eagle3-3step"].text
    assert edit[0] in text
    report = judge(tmp_path, spec_changes={"eagle3-3step": _rendered(text.replace(*edit))})
    assert [p.key for p in report.problems] == [key] and fix in report.problems[0].fix


def test_a_hub_id_is_one_clear_problem_not_the_sandboxed_judge_s_network_error(tmp_path):
    """The judge runs with IPAddressDeny=any (deploy/sandbox.py): SGLang's parse of a Hub ID fails to connect."""
    hub = "moonshotai/Kimi-K2.5"
    offline = Verdict(False, "OSError: We couldn't connect to 'https://huggingface.co' to load the files")
    report = judge(
        tmp_path,
        servers=with_server("baseline", **{"model-path": hub}),
        host=snapshot(models={hub: ModelDir(False, None, None)}, sglang=PINNED, verdicts={"baseline": offline}),
    )
    [problem] = report.problems
    assert problem.key == "servers.baseline.model-path" and "IPAddressDeny=any" in problem.message
    assert f"hf download {hub} --local-dir" in problem.fix and "huggingface.co" not in str(report.warnings)


@pytest.mark.parametrize(
    "installed, verdict", [("0.5.9", Verdict(False, "unrecognized arguments")), (PINNED, Verdict(None, "timed out"))]
)
def test_parser_verdicts_that_only_warn(tmp_path, installed, verdict):
    report = judge(tmp_path, host=snapshot(sglang=installed, verdicts={"baseline": verdict}))
    assert report.problems == [] and [w.key for w in report.warnings] == ["servers.baseline"]


@pytest.mark.parametrize(
    "config, length",
    [
        ({"max_position_embeddings": 4096}, 4096),
        ({"seq_length": 8192, "max_position_embeddings": 4096}, 8192),  # first present key wins
        ({"max_sequence_length": None, "max_position_embeddings": 4096}, 4096),
        ({"max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0}}, 131072),
        (
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 8192},
            },
            32768,
        ),
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
        ({}, 2048),
        (TARGET, 262144),
    ],
)
def test_derived_context_length_follows_sglang(config, length):
    assert derived_context_length(config)[0] == length


# A capture from the lab (python -m lab up, sglang-baseline running on the SGLang simulator), judging
# baseline and eagle3-3step as shipped plus two bad configs; config.json bodies trimmed to the keys
# the rules read. The lines before the result are what SSH may print first.
LAB_SERVERS = copy.deepcopy(SHIPPED)
for _name in ("eagle3-2step", "eagle3-5step"):
    del LAB_SERVERS["servers"][_name]
LAB_SERVERS["servers"]["ssh-port"] = {
    "port": 22,
    "speculative-algorithm": "EAGLE3",
    "speculative-draft-model-path": "/data/models/missing-eagle3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
}
LAB_SERVERS["servers"]["bad-parser"] = {"reasoning-parser": "kimi_k3"}
CAPTURED = [
    "Warning: Permanently added '10.200.0.11' (ED25519) to the list of known hosts.",
    'sglang-pve-preflight {"cap_sys_resource": false, "configs": {"bad-parser": null, "baseline": '
    '"f03208f8677c54bd8bc9a69c44ec679bf33f03ba", "eagle3-3step": "774a9467fa38fc01aff1ed0b2fe193cce54b6fb4", '
    '"ssh-port": null}, "gpus": ["nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5", "nvidia6", '
    '"nvidia7"], "init_userns": true, "python": ["/usr/bin/python3", 3, 11, 2], '
    '"limits": {"memlock": [8388608, 8388608], "nofile": [20000, 20000]}, '
    '"listeners": [{"address": "0.0.0.0", "holders": [{"cmdline": "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 '
    'startups", "comm": "sshd", "pid": 43, "unit": null}], "port": 22}, {"address": "::", "holders": [{"cmdline": '
    '"sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", "comm": "sshd", "pid": 43, "unit": null}], "port": '
    '22}, {"address": "0.0.0.0", "holders": [{"cmdline": '
    '"/opt/sglang/venvs/sglang-0.5.16.dev20260720+g8905cbd42/bin/python -m sglang.launch_server --config '
    '/etc/sglang/servers/baseline.yaml", "comm": "python", "pid": 3988, "unit": "sglang-baseline.service"}], '
    '"port": 8000}], "models": {"/data/models/Kimi-K2.5-eagle3": {"config": {"architectures": '
    '["LlamaForCausalLMEagle3"], "draft_vocab_size": null, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1,'
    ' 29, 57], "use_aux_hidden_state": true}, "hidden_size": 7168, "max_position_embeddings": 131072, "model_type":'
    ' "llama", "num_hidden_layers": 1, "rope_scaling": null, "target_hidden_size": 7168, "tie_word_embeddings": '
    'false, "vocab_size": 163840}, "dir": true, "error": null}, "/data/models/missing-eagle3": {"config": null, '
    '"dir": false, "error": null}, "/shared/models/Kimi-K2.5-INT4": {"config": {"architectures": '
    '["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": {"architectures": '
    '["DeepseekV3ForCausalLM"], "hidden_size": 7168, "max_position_embeddings": 262144, "num_hidden_layers": 61, '
    '"rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0, '
    '"original_max_position_embeddings": 4096, "type": "yarn"}, "tie_word_embeddings": false, "vocab_size": '
    '163840}}, "dir": true, "error": null}}, "sglang": "0.5.16.dev20260720+g8905cbd42", "verdicts": {"bad-parser": '
    "{\"error\": \"argument --reasoning-parser: invalid choice: 'kimi_k3' (choose from 'deepseek-r1', 'deepseek-v3', "
    "'glm45', 'gpt-oss', 'kimi', 'kimi_k2', 'minimax', 'minimax-append-think', 'qwen3', 'qwen3-thinking', "
    '\'step3\')", "ok": false}, "baseline": {"error": "", "ok": true}, "eagle3-3step": {"error": "", "ok": true}, '
    '"ssh-port": {"error": "OSError: Can\'t load the configuration of \'/data/models/missing-eagle3\'. If you were '
    "trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the "
    "same name. Otherwise, make sure '/data/models/missing-eagle3' is the correct path to a directory containing a "
    'config.json file", "ok": false}}}',
]


def test_fact_parses_a_captured_lab_output(tmp_path):
    found = PreflightProbe().process(CAPTURED)
    assert found.error is None and found.sglang == PINNED
    assert found.gpus == [f"nvidia{i}" for i in range(8)]
    assert found.limits == {"memlock": (8388608, 8388608), "nofile": (20000, 20000)}
    assert not found.cap_sys_resource and found.init_userns
    assert [(x.port, x.address, x.holders[0].comm, x.holders[0].unit) for x in found.listeners] == [
        (22, "0.0.0.0", "sshd", None),
        (22, "::", "sshd", None),
        (8000, "0.0.0.0", "python", "sglang-baseline.service"),
    ]
    assert found.models["/data/models/missing-eagle3"] == ModelDir(False, None, None)
    assert found.models[TARGET_PATH].config["text_config"]["num_hidden_layers"] == 61
    assert found.configs["bad-parser"] is None and len(found.configs["baseline"]) == 40
    assert found.verdicts["baseline"] == Verdict(True, "") and found.verdicts["bad-parser"].ok is False
    # and the rules judge it: the lab's limits and our own listener on 8000 pass
    report = judge(tmp_path, LAB_SERVERS, groups=("all", "lab"), host=found)
    # ssh-port's verdict (SGLang's OSError for the missing draft folder) repeats its draft's problem: not shown
    assert sorted(p.key for p in merged(report.problems)) == [
        "servers.bad-parser",
        "servers.ssh-port.port",
        "servers.ssh-port.speculative-draft-model-path",
    ]
    assert "port 8000 held by sglang-baseline.service" in report.summary()


def test_fact_reports_a_probe_without_result():
    assert "no result" in PreflightProbe().process(["Traceback (most recent call last):"]).error


# ---- the probe itself, run here as the fact's command (bash + python3), against a fake SGLang ----

FAKE_SERVER_ARGS = """
import argparse, os, yaml

class ServerArgs:
    def __init__(self, namespace):
        self.namespace = namespace

    def resolve_once(self):
        length = self.namespace.context_length
        if length and length > 131072 and os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") != "1":
            raise ValueError(f"Target model's context_length ({length}) is greater than "
                             "the derived context_length (131072)")

def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--port", type=int)
    parser.add_argument("--context-length", type=int)
    with open(argv[argv.index("--config") + 1]) as f:
        config = yaml.safe_load(f)
    return ServerArgs(parser.parse_args([w for k, v in config.items() for w in ("--" + k, str(v))]))
"""


def fake_venv(root: Path, version: str) -> Path:
    """A real venv (no pip) whose python sees a tiny sglang package (prepare_server_args + resolve_once)."""
    venv_dir = root / "venv"
    venv.EnvBuilder(symlinks=True, with_pip=False).create(venv_dir)
    site = Path(sysconfig.get_path("purelib", "venv", {"base": str(venv_dir), "platbase": str(venv_dir)}))
    (site / "pyyaml.pth").write_text(str(Path(yaml.__file__).parent.parent) + "\n")  # as SGLang's venv has it
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    (site / f"sglang-{version}.dist-info").mkdir()
    (site / f"sglang-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
    )
    return venv_dir


# systemd-run as this test sees it: records its argv, refuses a judge as root, runs the command after
# `--` with only the --setenv environment (a transient unit gets PID 1's, not the caller's) and the
# caller's stdin/stdout (--pipe). tests/lab/test_sandbox.py runs the real one.
FAKE_SYSTEMD_RUN = """#!{python}
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_SYSTEMD_RUN_LOG"], "a") as log:
    log.write(json.dumps(argv) + "\\n")
options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
if "--property=User=root" in options:
    sys.exit("refused: User=root")
env = dict(o.removeprefix("--setenv=").split("=", 1) for o in options if o.startswith("--setenv="))
env.update(PATH=os.environ["PATH"], TMPDIR=os.environ["TMPDIR"], PYTHONPATH=os.environ.get("PYTHONPATH", ""))
os.execve(command[0], command, env)
"""
SANDBOX = (("User", "sglang"), ("DynamicUser", "yes"), ("ProtectSystem", "strict"))


def run_probe(spec: ProbeSpec, tmp: Path) -> HostSnapshot:
    command = PreflightProbe().command(spec=spec)
    bin_dir = tmp.parent / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemd-run").write_text(FAKE_SYSTEMD_RUN.format(python=sys.executable))
    (bin_dir / "systemd-run").chmod(0o755)
    env = dict(os.environ, TMPDIR=str(tmp), PATH=f"{bin_dir}:{os.environ['PATH']}")
    env["FAKE_SYSTEMD_RUN_LOG"] = str(tmp.parent / "systemd-run.log")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return PreflightProbe().process(done.stdout.splitlines())


@pytest.fixture
def host_files(tmp_path):
    """Model dirs, host copies of server configs, and the rendered configs to compare."""
    models = tmp_path / "models"
    for name, config in (("target", TARGET), ("draft", DRAFT)):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(config))
    (models / "empty").mkdir()
    (models / "broken").mkdir()
    (models / "broken" / "config.json").write_text("{not json")
    etc = tmp_path / "etc"
    etc.mkdir()
    texts = {
        "same": f"model-path: {models}/target\nport: 8000\n",
        "changed": f"model-path: {models}/target\nport: 8001\n",
        "prefix": f"model-path: {models}/target\ncontext-len: 4096\n",
        "unknown": f"model-path: {models}/target\ntp-size: 8\n",
        "long": f"model-path: {models}/target\ncontext-length: 262144\n",
        "long-opted-in": f"model-path: {models}/target\ncontext-length: 262144\n",
    }
    (etc / "same.yaml").write_text(texts["same"])
    (etc / "changed.yaml").write_text("model-path: /old\n")
    configs = {
        name: RenderedConfig(
            str(etc / f"{name}.yaml"),
            text,
            hashlib.sha1(text.encode()).hexdigest(),
            {OPT_IN: "1"} if name == "long-opted-in" else {},
        )
        for name, text in texts.items()
    }
    paths = tuple(str(models / name) for name in ("target", "draft", "empty", "broken", "absent"))
    (tmp_path / "tmp").mkdir()
    return tmp_path, paths, configs


def test_probe_reads_models_configs_and_sglang_verdicts(host_files):
    tmp_path, paths, configs = host_files
    venv = fake_venv(tmp_path, PINNED)
    spec = ProbeSpec(paths, configs, (), str(venv), PINNED, judge_all=False, sandbox=SANDBOX)
    found = run_probe(spec, tmp_path / "tmp")
    assert found.error is None
    target, draft_dir, empty, broken, absent = (found.models[p] for p in paths)
    assert target.config["text_config"]["hidden_size"] == 7168 and draft_dir.config == DRAFT
    assert empty == ModelDir(True, None, "is missing") and absent == ModelDir(False, None, None)
    assert broken.is_dir and broken.config is None and broken.error.startswith("is not valid JSON")
    assert found.configs["same"] == configs["same"].sha1 and found.configs["long"] is None
    assert found.sglang == PINNED
    # only what differs from the host is judged; the unit's env reaches SGLang's parse
    assert set(found.verdicts) == {"changed", "prefix", "unknown", "long", "long-opted-in"}
    assert found.verdicts["changed"] == Verdict(True, "") and found.verdicts["long-opted-in"] == Verdict(True, "")
    assert found.verdicts["unknown"] == Verdict(False, "unrecognized arguments: --tp-size 8")
    # argparse takes a unique prefix silently: why the preflight judges flag names itself as well
    assert found.verdicts["prefix"] == Verdict(True, "")
    assert found.verdicts["long"].ok is False and "262144" in found.verdicts["long"].error
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary --config copies are gone
    # every parse ran through systemd-run, as the server's user in its sandbox, its job on stdin
    runs = [json.loads(line) for line in (tmp_path / "systemd-run.log").read_text().splitlines()]
    assert len(runs) == len(found.verdicts)
    for argv in runs:
        assert argv[:5] == ["--pipe", "--wait", "--quiet", "--collect", "--service-type=exec"]
        assert {f"--property={k}={v}" for k, v in SANDBOX} <= set(argv)
        assert argv[argv.index("--") + 1 :] == [f"{venv}/bin/python", "-c", preflight_probe.BOOT]
    assert set(found.limits) == {"nofile", "memlock"}  # this machine's PID 1


def test_probe_judges_everything_alone_or_under_another_sglang(host_files):
    tmp_path, paths, configs = host_files
    venv = fake_venv(tmp_path, "0.5.9")
    assert set(
        run_probe(
            ProbeSpec(paths, configs, (), str(venv), PINNED, judge_all=False, sandbox=SANDBOX), tmp_path / "tmp"
        ).verdicts
    ) == set(configs)
    assert set(
        run_probe(
            ProbeSpec(paths, configs, (), str(venv), "0.5.9", judge_all=True, sandbox=SANDBOX), tmp_path / "tmp"
        ).verdicts
    ) == set(configs)
    without = run_probe(
        ProbeSpec(paths, configs, (), str(tmp_path / "no-venv"), PINNED, judge_all=True), tmp_path / "tmp"
    )
    assert without.sglang is None and without.verdicts == {}


@pytest.mark.parametrize("sandbox", [(), (("User", "root"), ("DynamicUser", "yes")), (("ProtectSystem", "strict"),)])
def test_probe_never_lets_sglang_judge_as_root(host_files, sandbox):
    tmp_path, paths, configs = host_files
    spec = ProbeSpec(paths, configs, (), str(fake_venv(tmp_path, PINNED)), PINNED, judge_all=True, sandbox=sandbox)
    found = run_probe(spec, tmp_path / "tmp")
    assert set(found.verdicts) == set(configs) and not (tmp_path / "systemd-run.log").exists()
    assert all(v.ok is None and "never runs as root" in v.error for v in found.verdicts.values())


def test_probe_without_systemd_run_does_not_judge(host_files):
    tmp_path, paths, configs = host_files
    spec = ProbeSpec(paths, configs, (), str(fake_venv(tmp_path, PINNED)), PINNED, judge_all=True, sandbox=SANDBOX)
    command = PreflightProbe().command(spec=spec)
    (tmp_path / "empty-bin").mkdir()
    env = {"PATH": str(tmp_path / "empty-bin"), "TMPDIR": str(tmp_path / "tmp")}  # no systemd-run on it
    done = subprocess.run([shutil.which("bash"), "-c", command], capture_output=True, text=True, timeout=120, env=env)
    found = PreflightProbe().process(done.stdout.splitlines())
    assert {v.error for v in found.verdicts.values()} == {
        "systemd-run is missing: SGLang's parser runs only in the server's sandbox, never as root"
    }


def test_the_judge_gets_the_units_identity_and_sandbox_and_a_private_home():
    default = probe_spec(
        load_deployment("sglang1", dict(group_data("all"), server_groups=["video"]), PROJECT), VENV, True
    )
    assert default.sandbox == (*sandbox.identity("sglang", ["video"]), *sandbox.PROPERTIES)
    assert ("PrivateTmp", "yes") in default.sandbox
    assert all(value.startswith("/tmp/") for value in default.judge_env.values())
    assert set(default.judge_env) == set(paths.server_home_env())  # HOME, HF_HOME, ...: none of the server's dirs
    root = probe_spec(load_deployment("sglang1", dict(group_data("all"), server_user="root"), PROJECT), VENV, True)
    assert root.sandbox[:2] == (("User", sandbox.JUDGE_USER), ("DynamicUser", "yes"))
    assert ("IPAddressDeny", "any") in default.sandbox  # the judge reaches nothing on the network
    # systemd-run refuses a property its systemd does not know: Debian 11's 247 has no PrivateIPC
    old = probe_spec(load_deployment("sglang1", group_data("all"), PROJECT), VENV, True, systemd=247)
    assert "PrivateIPC" not in dict(old.sandbox) and dict(old.sandbox)["ProtectProc"] == "invisible"
    assert old.since == ()  # known on the controller: filtered there


def test_a_probe_whose_systemd_the_controller_did_not_know_leaves_out_what_it_lacks(monkeypatch):
    """The deploy reads the host's systemd in the probe's own command: the spec carries every
    property with the version that first knows it, the probe drops what its systemd is older than."""
    spec = probe_spec(load_deployment("sglang1", group_data("all"), PROJECT), VENV, True)
    assert dict(spec.since) == sandbox.SINCE and dict(spec.sandbox)["PrivateIPC"] == "yes"
    version = subprocess.CompletedProcess([], 0, stdout="systemd 247 (247.3-7+deb11u6)\n+PAM +AUDIT\n")
    monkeypatch.setattr(preflight_probe.subprocess, "run", lambda *args, **kwargs: version)
    assert preflight_probe.systemd_version() == 247
    props = [list(prop) for prop in spec.sandbox]
    kept = preflight_probe.known_to(247, props, dict(spec.since))
    assert "PrivateIPC" not in dict(kept) and dict(kept)["ProtectProc"] == "invisible"
    assert preflight_probe.known_to(None, props, dict(spec.since)) == props  # unknown: all, as for_systemd(None)


def test_probe_tells_our_listeners_from_foreign_ones(host_files):
    tmp_path, paths, configs = host_files
    foreign = socket.create_server(("127.0.0.1", 0))
    ours = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, time; s = socket.create_server(('127.0.0.1', 0)); "
            "print(s.getsockname()[1], flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, SGLANG_PVE_UNIT="sglang-baseline.service"),
    )
    try:
        our_port, foreign_port = int(ours.stdout.readline()), foreign.getsockname()[1]
        found = run_probe(
            ProbeSpec((), {}, (our_port, foreign_port), str(tmp_path / "no-venv"), PINNED, True), tmp_path / "tmp"
        )
    finally:
        ours.kill()
        ours.wait()
        foreign.close()
    holders = {x.port: [(h.pid, h.unit) for h in x.holders] for x in found.listeners}
    assert holders == {our_port: [(ours.pid, "sglang-baseline.service")], foreign_port: [(os.getpid(), None)]}


def test_the_host_rules_doctests():
    import doctest

    from sglang_pve.deploy.preflight import host

    assert doctest.testmod(host).failed == 0
