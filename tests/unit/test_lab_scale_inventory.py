"""inventory/lab_scale.py as pyinfra loads it (`pyinfra ... debug-inventory`), over
a lab state dir holding only the files `lab up --scale` writes: two nodes, six guests each behind
its own node, every container spec valid, GPU sets that each node can give, group_data/lab.py applied."""

import json
import os
import re
import subprocess
from collections import defaultdict

from sglang_pve.config.gpu_sets import gpu_set_problems
from sglang_pve.config.proxmox import load_container
from tests.conftest import PROJECT

PYINFRA = str(PROJECT / ".venv" / "bin" / "pyinfra")
HOST = re.compile(r"^\[(\S+)\]\s*$")


def parse(output: str) -> dict:
    """debug-inventory's output: {host: {"groups": [...], "data": {...}}}."""
    hosts, lines = {}, iter(output.splitlines())
    for line in lines:
        if match := HOST.match(line):
            groups = next(lines).removeprefix("--> Groups: ").split(", ")
            assert next(lines) == "--> Data:"
            block = []
            for data_line in lines:
                block.append(data_line)
                if data_line == "}":
                    break
            hosts[match[1]] = {"groups": groups, "data": json.loads("\n".join(block))}
    return hosts


def load(tmp_path, inventory: str) -> dict:
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "id_ed25519").write_text("key\n")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "api-key").write_text("k\n")
    (tmp_path / "pve" / "pve2").mkdir(parents=True)
    (tmp_path / "pve" / "credentials.json").write_text(json.dumps({"users": {"root@pam": {"password": "p"}}}))
    for where in ("pve", "pve/pve2"):
        (tmp_path / where / "pve-ssl.fingerprint").write_text(":".join(["AB"] * 32) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PVE_")} | {
        "SGLANG_PVE_LAB_DIR": str(tmp_path)
    }
    result = subprocess.run(
        [PYINFRA, inventory, "debug-inventory"], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return parse(result.stdout + result.stderr)


def test_two_nodes_six_guests_each_behind_its_node(tmp_path):
    hosts = load(tmp_path, "inventory/lab_scale.py")
    guests = {name: host for name, host in hosts.items() if "sglang_hosts" in host["groups"]}
    nodes = {name: host for name, host in hosts.items() if "pve_nodes" in host["groups"]}
    assert sorted(nodes) == ["pve1", "pve2"] and len(guests) == 6
    assert nodes["pve2"]["data"]["proxmox_api"]["host"].endswith(".3")
    assert all("lab" in host["groups"] and "lab_scale" in host["groups"] for host in hosts.values())
    specs = {name: load_container(name, host["data"]) for name, host in guests.items()}
    assert {name: spec.node for name, spec in specs.items()} == {
        "sglang1": "pve1",
        "sglang2": "pve2",
        "sglang3": "pve1",
        "sglang4": "pve1",
        "sglang5": "pve2",
        "router1": "pve2",
    }
    assert len({spec.vmid for spec in specs.values()}) == 6
    assert specs["router1"].gpus == [] and guests["router1"]["data"]["active_server"] is None  # only a router
    assert len({spec.net0.ip for spec in specs.values()}) == 6
    per_node = defaultdict(dict)
    for name, spec in specs.items():
        per_node[spec.node][name] = spec
    assert all(gpu_set_problems(node, list(range(8)), found) == [] for node, found in per_node.items())
    config = (tmp_path / "ssh" / "ssh_config").read_text()
    for spec in specs.values():
        assert f"Host {spec.net0.ip.split('/')[0]}\n    ProxyJump {spec.node}\n" in config


def test_the_one_node_inventory_is_unchanged(tmp_path):
    hosts = load(tmp_path, "inventory/lab.py")
    assert sorted(hosts) == ["pve1", "sglang1"]
    spec = load_container("sglang1", hosts["sglang1"]["data"])
    assert (spec.node, spec.vmid, spec.gpus) == ("pve1", 129, "all")
    assert hosts["sglang1"]["data"]["servers_file"] == "group_data/servers.yml"
