"""The lifecycle spec: the documented example loads; bad values are refused naming key and file."""

import json
import re

import pytest

from sglang_pve.agent import spec as spec_module
from sglang_pve.agent.spec import SpecError, load, parse


def documented_example() -> dict:
    return json.loads(re.search(r"```json\n(.*?)```", spec_module.__doc__, re.S).group(1))


def test_the_documented_example_is_valid():
    spec = parse(documented_example(), "/etc/sglang/servers/baseline.lifecycle.json")
    assert spec.unit == "sglang-baseline.service" and spec.watchdog.failures == 3
    assert spec.stall_timeout("launch") == 600  # before the first line: dist_init's
    assert spec.stall_timeout("ready") == 900  # waiting for /health after the ready line: warmup's
    assert spec.stall_timeout("cuda_graph") == 1200
    assert spec.state_file("run", ".offset") == "/var/lib/sglang-pve/run/baseline.offset"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"watchdog": {"failures": 0}}, "key 'watchdog.failures' is 0; expected an integer >= 1"),
        ({"stall_timeout_s": {"weights": -1}}, "key 'stall_timeout_s.weights' is -1; expected a finite number > 0"),
        ({"port": 70000}, "key 'port' is 70000; expected an integer >= 1 and <= 65535"),
        ({"speculative": "yes"}, "key 'speculative' is 'yes'; expected true or false"),
        ({"server": "../etc"}, "key 'server' is '../etc'"),
        ({"log": "relative.log"}, "key 'log' is 'relative.log'; expected an absolute path"),
        ({"unit": "vllm-baseline.service"}, "starting with unit_prefix 'sglang-'"),
        ({"extra": 1}, "unknown key(s) extra"),
        ({"stall_timeout_s": {"weights": 1, "weigths": 2}}, "unknown key(s) stall_timeout_s.weigths"),
    ],
)
def test_bad_values_are_refused_with_key_and_fix(change, message):
    data = documented_example()
    for key, value in change.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    with pytest.raises(SpecError) as error:
        parse(data, "/etc/sglang/servers/baseline.lifecycle.json")
    assert message in str(error.value) and "/etc/sglang/servers/baseline.lifecycle.json" in str(error.value)


def test_missing_keys_and_unreadable_files(tmp_path):
    data = documented_example()
    del data["watchdog"]["backoff_s"]
    with pytest.raises(SpecError, match=r"missing key\(s\) watchdog.backoff_s"):
        parse(data)
    with pytest.raises(SpecError, match="file not found"):
        load(str(tmp_path / "nope.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SpecError, match="cannot read it as JSON"):
        load(str(tmp_path / "bad.json"))
