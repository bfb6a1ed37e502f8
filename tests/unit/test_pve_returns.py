"""What the emulator answers has the shape the real schema's `returns` gives (types, required
keys, enums), for the reads a client makes."""

import pytest

from lab.pve.testing import EmulatedNode
from lab.pve.validate import check_prop


@pytest.mark.parametrize("version", [8, 9])
def test_reads_match_the_returns_schema(tmp_path, version):
    with EmulatedNode(tmp_path, version=version) as pve:
        px = pve.client()
        upid = px.nodes("pve1").lxc.post(
            vmid=129,
            ostemplate=pve.TEMPLATE,
            rootfs="local-zfs:8",
            unprivileged=0,
            onboot=1,
            hostname="sglang1",
            cores=4,
            memory=2048,
            features="nesting=1",
            start=1,
            net0="name=eth0,bridge=vmbr0,ip=10.0.0.5/24",
            dev0="/dev/nvidia0,mode=0666",
        )
        assert pve.wait(upid)["exitstatus"] == "OK"
        assert pve.wait(px.nodes("pve1").lxc(129).snapshot.post(snapname="pre"))["exitstatus"] == "OK"
        ct = "/nodes/pve1/lxc/129"
        reads = [
            "/version",
            "/nodes",
            "/nodes/pve1/status",
            "/cluster/resources",
            "/cluster/resources?type=vm",
            "/cluster/resources?type=node",
            "/cluster/resources?type=storage",
            "/cluster/status",
            "/cluster/backup-info/not-backed-up",
            "/nodes/pve1/subscription",
            "/nodes/pve1/replication",
            "/nodes/pve1/qemu",
            "/nodes/pve1/tasks",
            "/cluster/nextid",
            "/nodes/pve1/lxc",
            "/nodes/pve1/storage",
            "/nodes/pve1/storage/local/content",
            f"{ct}/config",
            f"{ct}/status/current",
            f"{ct}/snapshot",
            f"{ct}/snapshot/pre/config",
            f"{ct}/pending",
            f"/nodes/pve1/tasks/{upid}/status",
            f"/nodes/pve1/tasks/{upid}/log",
        ]
        for path in reads:
            path, _, query = path.partition("?")
            data = px.get(path.lstrip("/"), **dict([query.split("=")] if query else []))
            _, info, _ = pve.emulator.schema.find("GET", path)
            errors = {}
            check_prop(data, info["returns"], "", errors)
            assert errors == {}, (path, errors)
