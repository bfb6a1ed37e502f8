"""The one `systemctl show` parser and the one grouping of ActiveState (sglang_pve/agent/systemd.py),
which the switch, the releases report, status, the reaper, the ServerUnits fact and the bench share."""

import pytest

from sglang_pve.agent import systemd
from tests.unit.agent_support import fake_systemctl, systemctl_calls

pytestmark = pytest.mark.usefixtures("agent_env")

# `systemctl show -p Id,LoadState,ActiveState a b` prints a blank line between units
SHOWN = (
    "Id=a.service\nLoadState=loaded\nActiveState=activating\n\n"
    "Id=b.service\nLoadState=not-found\nActiveState=inactive\n"
)


def test_parse_show_splits_units_on_blank_lines_and_on_a_repeated_property():
    expected = [
        {"Id": "a.service", "LoadState": "loaded", "ActiveState": "activating"},
        {"Id": "b.service", "LoadState": "not-found", "ActiveState": "inactive"},
    ]
    assert systemd.parse_show(SHOWN) == expected
    assert systemd.parse_show([line for line in SHOWN.splitlines() if line]) == expected  # pyinfra drops blanks
    assert systemd.parse_show("Id=a.service\nDescription=x=y\n") == [{"Id": "a.service", "Description": "x=y"}]
    assert systemd.parse_show("") == []


def test_the_states_that_run_hold_the_gpus_or_are_stopped():
    assert {"active", "activating", "reloading"} <= systemd.RUNNING  # a start in its gate runs
    assert "deactivating" not in systemd.RUNNING and "deactivating" in systemd.HOLDING  # draining holds the GPUs
    assert systemd.RUNNING < systemd.HOLDING
    assert systemd.STOPPED == {"inactive", "failed"} and not systemd.STOPPED & systemd.HOLDING


@pytest.mark.parametrize(
    "shown, expected",
    [
        # systemd 252 (Debian 12): `systemctl start --no-block` of a unit After= a running oneshot
        ({"ActiveState": "inactive", "Job": "139"}, "activating"),
        ({"ActiveState": "failed", "Job": "140"}, "activating"),  # a failed unit started again
        ({"ActiveState": "inactive", "Job": ""}, "inactive"),
        ({"ActiveState": "active", "Job": "141"}, "active"),  # e.g. a stop job queued: it still runs
        ({"ActiveState": "deactivating", "Job": "142"}, "deactivating"),
        ({}, None),  # systemd named no such unit
    ],
)
def test_a_queued_job_makes_a_stopped_unit_one_on_its_way_up(shown, expected):
    assert systemd.state(shown) == expected


def test_in_states_asks_systemd_once_for_all_units(tmp_path, monkeypatch):
    units = {
        "sglang-up.service": {"ActiveState": "active"},
        "sglang-gate.service": {"ActiveState": "activating"},
        "sglang-drain.service": {"ActiveState": "deactivating"},
        "sglang-dead.service": {"ActiveState": "failed"},
        "sglang-queued.service": {"ActiveState": "inactive", "Job": "139"},  # a start waiting at boot
    }
    monkeypatch.setenv("SGLANG_PVE_SYSTEMCTL", str(fake_systemctl(tmp_path, units)))
    names = [*units, "sglang-missing.service"]
    assert systemd.in_states(names, systemd.RUNNING) == [
        "sglang-up.service",
        "sglang-gate.service",
        "sglang-queued.service",
    ]
    assert systemd.in_states(names, systemd.HOLDING) == [
        "sglang-up.service",
        "sglang-gate.service",
        "sglang-drain.service",
        "sglang-queued.service",
    ]
    assert systemd.in_states(names, systemd.STOPPED) == ["sglang-dead.service", "sglang-missing.service"]
    assert [c[0] for c in systemctl_calls(tmp_path)] == ["show"] * 3
    assert systemd.in_states([], systemd.RUNNING) == [] and len(systemctl_calls(tmp_path)) == 3
