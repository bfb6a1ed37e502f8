"""Prometheus file_sd targets from the inventory: file_sd/<host>.json on the controller, one per
container (sglang_pve/deploy/scrape_targets.py says what is in it). Written at execution time
(`--dry` writes nothing); the hosts are not changed."""

import json
import os
from pathlib import Path

from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.operations import python

from sglang_pve.deploy import replicas
from sglang_pve.deploy import scrape_targets as targets_module
from sglang_pve.deploy.context import deployment
from sglang_pve.provision.roles import is_node

OUT_DIR = "file_sd"  # under the project directory (pyinfra's cwd), unless data names scrape_targets_dir


def _text(groups: list[dict[str, object]]) -> str:
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


def _write(path: Path, groups: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(_text(groups))
    os.replace(temp, path)  # Prometheus re-reads the file on change: never a half-written one


@deploy("Scrape targets")
def scrape_targets() -> None:
    if is_node():
        return
    config = deployment()
    servers = {name: (s.args.port, bool(s.args.enable_metrics)) for name, s in config.servers.items()}
    routers = {name: s.router.prometheus_port for name, s in replicas.routed_by(host).items()}
    name = replicas.short(host.name)
    groups = targets_module.targets(name, replicas.address(host), servers, routers)
    path = Path(config.data.scrape_targets_dir or Path(state.cwd or os.getcwd()) / OUT_DIR) / f"{name}.json"
    if path.is_file() and path.read_text() == _text(groups):
        return  # up to date: no change to report
    python.call(name=f"Scrape targets: {path}", function=_write, path=path, groups=groups)
