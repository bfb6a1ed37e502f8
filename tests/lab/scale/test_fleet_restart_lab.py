"""A container restart that provisioning owes a fleet member, for real in the scale lab (provision/
fleet_restart.py): a change that applies only at start (dev0's mode edited by hand in the node's
config: the deploy PUTs it back, PVE keeps it in [pve:pending]) on replicas and on a TP rank.

- Replicas sglang1 and sglang3 live on one node (pve1): its node used to reboot both at once under
  the router. Now each leaves the router first and comes back once its server is ready again, one
  at a time (max_unavailable 1), while requests through SGLang's router on router1 see no failure.
- TP rank sglang4 (rank 0) owes the restart: with its peer sglang5 left out of the run, the run is
  refused before any write; with both, every rank stops before sglang4's container restarts (so
  sglang5's peer watch fails nothing: no new diagnosis on it), and the group switch starts both.
- tasks/containers.py (provisioning without the members' deploys) refuses a replica's restart.
- A replica out of its router on purpose (router-leave, as a bench) stays out while the router's
  host is deployed (its worker sync reads the replica's mark).
"""

import json
import re

import pytest

from tests.lab.conftest import AGENT_PYZ, grand_total, lab_api_key, pyinfra
from tests.lab.scale.conftest import on_guest
from tests.lab.scale.traffic import Watch, call

pytestmark = [pytest.mark.lab]
DEV0 = r"s|^\(dev0: [^,]*\),mode=0666$|\1,mode=0600|"


def vmid_of(name: str) -> tuple[str, str]:
    from lab import layout

    node, vmid, _ = layout.SCALE_GUESTS[name]
    return node, str(vmid)


def dev0_by_hand(name: str) -> None:
    """An operator's edit of the node's config: dev0 to mode 0600 (the deploy puts 0666 back, pending)."""
    node, vmid = vmid_of(name)
    on_guest("sed", "-i", DEV0, f"/etc/pve/lxc/{vmid}.conf", host=node)
    assert "mode=0600" in on_guest("grep", "^dev0:", f"/etc/pve/lxc/{vmid}.conf", host=node).stdout


def conf(name: str) -> str:
    """The container's config as it runs (its snapshots' sections, the one before the change too, cut)."""
    node, vmid = vmid_of(name)
    text = on_guest("cat", f"/etc/pve/lxc/{vmid}.conf", host=node).stdout
    return re.split(r"^\[(?!pve:pending\])", text, flags=re.M)[0]


def owed(name: str) -> bool:
    node, vmid = vmid_of(name)
    return (
        on_guest("test", "-e", f"/var/lib/sglang-pve/restart-owed/{vmid}.json", check=False, host=node).returncode == 0
    )


def boot(name: str) -> str:
    """When the container's init started (field 22 of /proc/1/stat): another value after a restart."""
    return on_guest("cut", "-d ", "-f22", "/proc/1/stat", host=name).stdout.strip()


def diagnoses(name: str) -> set[str]:
    return set(on_guest("ls", "/var/lib/sglang-pve/diagnoses/", check=False, host=name).stdout.split())


def started(name: str) -> str:
    report = json.loads(on_guest("python3", AGENT_PYZ, "status", "--json", host=name).stdout)
    (entry,) = [e for e in report["servers"] if e["state"]["ActiveState"] == "active"]
    return entry["state"]["ExecMainStartTimestampMonotonic"]


def limits(*names: str) -> list[str]:
    return [word for name in names for word in ("--limit", name)]


@pytest.fixture(scope="module")
def lab(scale_lab):
    from lab import layout

    _, _, router = layout.SCALE_GUESTS["router1"]
    return {"inventory": scale_lab.inventory, "router": f"http://{router}:30000", "key": lab_api_key()}


def test_replicas_on_one_node_restart_one_at_a_time_out_of_the_router_and_no_request_fails(lab):
    from lab import layout

    replicas = ("sglang1", "sglang3")  # both on pve1
    for name in replicas:
        dev0_by_hand(name)
    code, refused = pyinfra(*limits("pve1"), inventory=lab["inventory"], deploy="tasks/containers.py", check=False)
    assert (
        code != 0
        and "replica_sets.llama.members = ['sglang1', 'sglang2', 'sglang3']: container 201 (sglang1) "
        "must restart (dev0 only apply at start)"
        in refused
    ), refused[-3000:]
    assert "Fix: run deploy.py instead" in refused and not any(owed(n) for n in replicas)  # refused before any write
    boots = {name: boot(name) for name in replicas}
    with Watch(lab["router"], lab["key"]) as watch:
        _, output = pyinfra(*limits("pve1", *replicas), inventory=lab["inventory"])
    counts = [len(listed) for listed in watch.lists]
    print(f"\nreplica restarts: {watch.sent} requests, {len(watch.failed)} failed; workers listed {counts[::5]}")
    assert watch.failed == [], f"{len(watch.failed)} of {watch.sent} requests failed: {watch.failed[:5]}"
    assert min(counts) == 2, counts  # one of the three out at a time (max_unavailable 1), never two
    assert all(watch.left_and_came_back(url) for url in watch.lists[0] if re.search(r"\.2[13]:", url)), watch.lists
    assert counts[-1] == 3, watch.lists[-1]
    for name in replicas:
        _, vmid = vmid_of(name)
        assert re.search(
            rf"container {vmid} owes a restart \(dev0 only apply at start\): left to its own deploy", output
        )
        _, _, address = layout.SCALE_GUESTS[name]
        left = output.index(f"removing worker http://{address}:")  # the agent's router-leave, on the replica
        rebooted = output.index(f"restarting container {vmid}: dev0 only apply at start")  # through its node
        back = re.search(rf"worker http://{re.escape(address)}:\d+ is back, healthy", output)
        assert back, output[-6000:]
        back = back.start()
        assert left < rebooted < back, output[-6000:]
        assert boot(name) != boots[name] and not owed(name)
        assert "dev0: /dev/nvidia" in conf(name) and "mode=0600" not in conf(name) and "[pve:pending]" not in conf(name)
    _, again = pyinfra(*limits("pve1", *replicas), inventory=lab["inventory"])
    assert grand_total(again)["changed"] == 0, again[-3000:]


def test_a_tp_rank_restarts_only_once_every_rank_stopped_and_the_group_starts_together(lab):
    dev0_by_hand("sglang4")
    code, refused = pyinfra(*limits("pve1", "sglang4"), inventory=lab["inventory"], check=False)
    assert (
        code != 0 and "tp_groups.tp.members = ['sglang4', 'sglang5']: container 204 (sglang4) must restart" in refused
    )
    assert "Fix: include every rank of tp: --limit sglang4 --limit sglang5" in refused, refused[-3000:]
    assert not owed("sglang4") and "mode=0600" in conf("sglang4")  # refused before any write
    boots, peer = {name: boot(name) for name in ("sglang4", "sglang5")}, started("sglang5")
    seen = diagnoses("sglang5")
    _, dry = pyinfra("--dry", *limits("pve1", "pve2", "sglang4", "sglang5"), inventory=lab["inventory"], yes=False)
    for name in ("sglang4", "sglang5"):  # what would happen, and nothing happened
        assert re.search(rf"\[{name}\] would stop sglang-baseline.service \(TP group tp: every rank stops before ", dry)
    assert "restart container 204 (dev0 only apply at start); the group switch" in dry, dry[-6000:]
    assert not owed("sglang4") and "mode=0600" in conf("sglang4") and boot("sglang4") == boots["sglang4"]
    assert started("sglang5") == peer
    _, output = pyinfra(*limits("pve1", "pve2", "sglang4", "sglang5"), inventory=lab["inventory"])
    assert boot("sglang4") != boots["sglang4"] and boot("sglang5") == boots["sglang5"]  # only the rank that owed it
    assert not owed("sglang4") and "mode=0600" not in conf("sglang4")
    assert diagnoses("sglang5") == seen  # stopped before rank 0 went down: its peer watch failed nothing
    assert started("sglang5") != peer  # started again by the group switch, with rank 0
    assert "restarting container 204: dev0 only apply at start" in output, output[-6000:]
    _, again = pyinfra(*limits("pve1", "pve2", "sglang4", "sglang5"), inventory=lab["inventory"])
    assert grand_total(again)["changed"] == 0, again[-3000:]


def healthy(lab) -> list[str]:
    status, body = call(f"{lab['router']}/workers", lab["key"], timeout=10)
    assert status == 200, body
    return sorted(w["url"] for w in body["workers"] if w["is_healthy"])


def test_a_deploy_of_the_routers_host_leaves_a_replica_out_that_left_on_purpose(lab):
    """README: a replica out of its router on purpose (the agent's router-leave: a bench) stays out
    while the router's host is deployed; its worker sync used to add it back."""
    from lab import layout

    _, _, address = layout.SCALE_GUESTS["sglang2"]
    words = ["--dir", "/var/lib/sglang-pve/releases", "--router", lab["router"], "--address", address]
    on_guest("python3", AGENT_PYZ, "router-leave", *words, "--drain-s", "5", host="sglang2")
    try:
        assert len(healthy(lab)) == 2 and not any(address in url for url in healthy(lab))
        _, output = pyinfra(*limits("router1"), inventory=lab["inventory"])  # sglang2 is not in the run
        assert re.search(r"\[router1\] +\S*sglang2 is out of router \S+ on purpose since 20", output), output
        assert len(healthy(lab)) == 2 and not any(address in url for url in healthy(lab))
    finally:
        on_guest("python3", AGENT_PYZ, "router-join", *words, host="sglang2")
    assert len(healthy(lab)) == 3
