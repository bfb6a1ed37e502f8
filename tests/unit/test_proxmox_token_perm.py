"""A token's config changes as Proxmox judges them (pve-container src/PVE/LXC.pm
check_ct_modify_config_perm): the toolkit refuses at plan time what the emulator, like PVE,
refuses with 403, and both judge `features` old-vs-new (cases: tests/unit/features_cases.py)."""

import doctest

import pytest
from proxmoxer.core import ResourceException

from lab.pve.rules import feature_change as emulator_feature_change
from lab.pve.testing import EmulatedNode
from sglang_pve.config import ConfigError
from sglang_pve.provision import diff, token_perm
from sglang_pve.provision.container import Guest, plan
from sglang_pve.provision.token_perm import feature_change, token_refusals
from tests.unit.features_cases import CASES
from tests.unit.test_proxmox_provision import GPUS, converge, node_of, spec_of, writes


def test_doctests():
    assert doctest.testmod(token_perm).failed == 0


@pytest.mark.parametrize("old, new, verdict", CASES)
def test_features_change_judged_old_vs_new_as_pve(old, new, verdict):
    assert feature_change(old, new) == verdict
    assert emulator_feature_change(old, new) == verdict


@pytest.mark.parametrize("old, new, verdict", CASES)
def test_token_refused_exactly_for_other_feature_changes(old, new, verdict):
    change = diff.ConfigDiff(changes=[diff.Change("features", old, new)])
    problems = token_refusals(change, unprivileged=True)
    assert bool(problems) == (verdict == "other")
    if problems:
        text = problems[0].render("pve1")
        assert "an API token cannot change a feature other than nesting, even for root@pam" in text
        assert f"{old or '(unset)'} -> {new or '(deleted)'}" in text


def test_dropping_keyctl_while_keeping_nesting_was_wrongly_allowed_before():
    """The old check read the new string only: "nesting=1" after "keyctl=1,nesting=1" passed,
    and PVE answered 403 at the PUT."""
    change = diff.ConfigDiff(changes=[diff.Change("features", "keyctl=1,nesting=1", "nesting=1")])
    assert token_refusals(change, unprivileged=True)
    kept = diff.ConfigDiff(changes=[diff.Change("features", "keyctl=1,nesting=1", "keyctl=1,nesting=0")])
    assert token_refusals(kept, unprivileged=True) == []


def test_a_token_may_not_set_devices_or_any_feature_of_a_privileged_container():
    change = diff.ConfigDiff(changes=[diff.Change("features", None, "nesting=1")])
    problem = token_refusals(change, unprivileged=False)[0].render("pve1")
    assert "cannot change any feature of a privileged container" in problem
    devices = diff.ConfigDiff(changes=[diff.Change("dev0", None, "/dev/nvidia0,mode=0666")])
    problem = token_refusals(devices, unprivileged=True)[0].render("pve1")
    assert "an API token cannot configure device passthrough (devN), even for root@pam" in problem
    assert "Fix: use root@pam with a password" in problem


@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    with EmulatedNode(tmp_path_factory.mktemp("pve")) as node:
        yield node


@pytest.mark.parametrize("index, case", list(enumerate(CASES)))
def test_emulator_answers_a_token_as_pve(pve, index, case):
    old, new, verdict = case
    vmid = 200 + index
    params = dict(vmid=vmid, ostemplate=pve.TEMPLATE, rootfs="local-lvm:4", unprivileged=1)
    upid = pve.client().nodes("pve1").lxc.post(**params, **({"features": old} if old else {}))
    assert pve.wait(upid)["exitstatus"] == "OK"
    config = pve.client(token=True).nodes("pve1").lxc(vmid).config
    change = {"delete": "features"} if new is None else {"features": new}
    if verdict == "other":
        with pytest.raises(ResourceException) as e:
            config.put(**change)
        assert (e.value.status_code, e.value.content) == (
            403,
            "Permission check failed (changing feature flags (except nesting) is only allowed for root@pam)",
        )
        assert config.get().get("features") == old
    else:
        config.put(**change)
        assert config.get().get("features") == new


def test_a_token_run_is_judged_on_the_containers_features_as_pve_judges_it(tmp_path):
    """The container operation with a token, on the emulator: dropping keyctl is refused at plan
    time with nothing written (PVE would answer 403 at the PUT); toggling nesting while keeping
    keyctl passes the toolkit and the emulator alike (the old new-string-only check refused it)."""

    guest = Guest(ssh_hostname="10.0.0.129", known_hosts=str(tmp_path / "known_hosts"))
    with EmulatedNode(tmp_path / "pve") as pve:
        both = spec_of(pve, unprivileged=True, features={"nesting": True, "keyctl": True})
        assert converge(pve, node_of(pve), both, guest).errors == []
        before = len(writes(pve))
        with pytest.raises(ConfigError) as caught:
            plan(spec_of(pve, unprivileged=True, features={"nesting": True}), node_of(pve, token=True), GPUS, guest)
        assert "cannot change a feature other than nesting" in str(caught.value)
        assert "keyctl=1,nesting=1 -> nesting=1" in str(caught.value)
        assert len(writes(pve)) == before
        toggled = spec_of(pve, unprivileged=True, features={"nesting": False, "keyctl": True})
        assert converge(pve, node_of(pve, token=True), toggled, guest).errors == []
        assert "features: keyctl=1,nesting=0\n" in pve.conf_text(129)
