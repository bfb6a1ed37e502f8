"""Prometheus file_sd targets of one inventory host (https://prometheus.io/docs/guide/file-sd/):
its node_exporter (the agent's metrics, its textfile collector), each port of the server
configurations with `enable-metrics` (SGLang's /metrics; labelled server=NAME where only one
configuration uses the port, since the configurations on one port take turns) and each
router it runs (launch_router's --prometheus-port). One JSON list per host:

    [{"targets": ["10.0.0.11:9100"], "labels": {"job": "node", "host": "sglang1"}},
     {"targets": ["10.0.0.11:8000"], "labels": {"job": "sglang", "host": "sglang1"}},   (several configurations)
     {"targets": ["10.0.0.11:8001"], "labels": {"job": "sglang", "host": "sglang1", "server": "big"}},
     {"targets": ["10.0.0.20:29000"], "labels": {"job": "sglang-router", "host": "router1", "replica_set": "kimi"}}]

Use it as `file_sd_configs: [{files: [".../file_sd/*.json"]}]` with one scrape job reading each
job label (relabel on `job`), or one job per file glob."""

from collections.abc import Mapping

from sglang_pve.deploy.paths import SGLANG_DEFAULT_PORT

NODE_EXPORTER_PORT = 9100  # node_exporter's default --web.listen-address


def host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def targets(
    host: str, address: str, servers: Mapping[str, tuple[int | None, bool]], routers: Mapping[str, int]
) -> list[dict[str, object]]:
    """servers: name -> (its --port, its enable-metrics); routers: replica set -> its prometheus_port."""
    groups: list[dict[str, object]] = [
        {"targets": [host_port(address, NODE_EXPORTER_PORT)], "labels": {"job": "node", "host": host}}
    ]
    by_port: dict[int, list[str]] = {}
    for name, (port, metrics) in sorted(servers.items()):
        if metrics:
            by_port.setdefault(port or SGLANG_DEFAULT_PORT, []).append(name)
    for port, names in sorted(by_port.items()):
        # configurations sharing a port take turns on it: one target; which one runs is
        # sglang_pve_release_info{server} of the same host label
        labels = {"job": "sglang", "host": host} | ({"server": names[0]} if len(names) == 1 else {})
        groups.append({"targets": [host_port(address, port)], "labels": labels})
    for name, port in sorted(routers.items()):
        labels = {"job": "sglang-router", "host": host, "replica_set": name}
        groups.append({"targets": [host_port(address, port)], "labels": labels})
    return groups
