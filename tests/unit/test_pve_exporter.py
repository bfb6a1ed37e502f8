"""A real third-party client against the emulator: prometheus-pve-exporter (its own WSGI app,
config parser and collectors; prometheus-pve/prometheus-pve-exporter src/pve_exporter/) scrapes
a node with one of this toolkit's GPU containers, with every collector on, by API token and by
password. Its calls (cluster status and resources, version, backup info, subscription,
replication, guest lists and configs) all answer 200, each request passes the PVE schema, and
the metrics say what the node holds."""

import logging

import pytest
from pve_exporter.collector import CollectorsOptions
from pve_exporter.config import config_from_yaml
from pve_exporter.http import PveExporterApplication
from werkzeug.test import Client

from lab.pve import requestlog
from lab.pve.testing import PASSWORD, TOKEN_SECRET, EmulatedNode

ALL_COLLECTORS = CollectorsOptions(**{name: True for name in CollectorsOptions._fields})


@pytest.fixture(scope="module", params=[8, 9], ids=["pve8", "pve9"])
def pve(tmp_path_factory, request):
    with EmulatedNode(tmp_path_factory.mktemp("pve"), version=request.param) as node:
        px = node.client()
        upid = px.nodes("pve1").lxc.post(
            vmid=129,
            ostemplate=node.TEMPLATE,
            hostname="sglang1",
            rootfs="local-zfs:8",
            cores=8,
            memory=4096,
            unprivileged=0,
            features="nesting=1",
            tags="sglang",
            net0="name=eth0,bridge=vmbr0,ip=10.0.0.5/24",
            dev0="/dev/nvidia0,mode=0666",
            start=1,
        )
        assert node.wait(upid)["exitstatus"] == "OK"
        upid = px.nodes("pve1").lxc.post(vmid=130, ostemplate=node.TEMPLATE, rootfs="local-lvm:4", unprivileged=1)
        assert node.wait(upid)["exitstatus"] == "OK"
        yield node


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    """One exporter for the run, as deployed: its modules trust the CA file ca.pem (the exporter's
    metrics are process-global, so a second app would collide)."""
    ca = tmp_path_factory.mktemp("exporter") / "ca.pem"
    config = config_from_yaml(
        {
            "token": {"user": "root@pam", "token_name": "deploy", "token_value": TOKEN_SECRET, "verify_ssl": str(ca)},
            "password": {"user": "root@pam", "password": PASSWORD, "verify_ssl": str(ca)},
        }
    )
    assert config.valid, config
    return ca, Client(PveExporterApplication(config, ALL_COLLECTORS, logging.getLogger("test")))


def scrape(pve, exporter, module: str) -> str:
    ca, client = exporter
    ca.write_bytes(pve.cert.read_bytes())
    query = {"module": module, "target": f"127.0.0.1:{pve.port}", "cluster": 1, "node": 1}
    response = client.get("/pve", query_string=query)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


@pytest.mark.parametrize("module", ["token", "password"])
def test_the_exporter_scrapes_the_node(pve, exporter, module):
    before = len(pve.requests())
    metrics = scrape(pve, exporter, module)
    calls = pve.requests()[before:]
    assert {c["path"] for c in calls} >= {
        "/cluster/status",
        "/cluster/resources",
        "/version",
        "/cluster/backup-info/not-backed-up",
        "/nodes/pve1/subscription",
        "/nodes/pve1/replication",
        "/nodes/pve1/qemu",
        "/nodes/pve1/lxc",
        "/nodes/pve1/lxc/129/config",
    }
    assert [c for c in calls if c["status"] != 200] == []
    assert requestlog.schema_violations(calls) == []
    lines = set(metrics.splitlines())
    assert 'pve_up{id="node/pve1"} 1.0' in lines
    assert 'pve_up{id="lxc/129"} 1.0' in lines and 'pve_up{id="lxc/130"} 0.0' in lines
    assert 'pve_up{id="storage/pve1/local-zfs"} 1.0' in lines
    assert 'pve_guest_info{id="lxc/129",name="sglang1",node="pve1",tags="sglang",template="0",type="lxc"} 1.0' in lines
    assert 'pve_guest_info{id="lxc/130",name="CT130",node="pve1",tags="",template="0",type="lxc"} 1.0' in lines
    assert 'pve_memory_size_bytes{id="lxc/129"} 4.294967296e+09' in lines
    assert 'pve_disk_size_bytes{id="lxc/129"} 8.589934592e+09' in lines
    assert 'pve_cpu_usage_limit{id="lxc/129"} 8.0' in lines
    assert 'pve_not_backed_up_total{id="cluster/pve1"} 2.0' in lines
    assert 'pve_node_info{id="node/pve1",level="",name="pve1",nodeid="0"} 1.0' in lines
    assert 'pve_subscription_status{id="node/pve1",status="notfound"} 1.0' in lines
    version = pve.client().version.get()
    assert f'pve_version_info{{release="{version["release"]}",repoid="{version["repoid"]}",' in metrics
