"""Each default in one place: the config model. group_data/all.py holds this repository's site
choices only; a repository with nothing but its servers gets a working deployment; the lab
serves what the defaults pin."""

import pytest
from pydantic import BaseModel, ValidationError

from lab import index, layout
from sglang_pve.config import load_deployment
from sglang_pve.config.bench import BenchOptions, ProbeOptions
from sglang_pve.config.deployment import HostData
from tests.conftest import PROJECT, group_data, group_file

SITE = group_file("all")
REQUIRED = {"servers_file": SITE["servers_file"], "active_server": SITE["active_server"]}
MODELS = (HostData, ProbeOptions, BenchOptions)  # every model that reads host data for every host


def _validated(model: type[BaseModel], key: str, value: object) -> object:
    base = REQUIRED if model is HostData else {}
    return getattr(model.model_validate({**base, key: value}), key)


@pytest.mark.parametrize("key", sorted(SITE))
def test_group_data_all_restates_no_model_default(key):
    for model in MODELS:
        field = model.model_fields.get(key)
        if field is None or field.is_required():
            continue
        default = _validated(model, key, field.get_default(call_default_factory=True))
        assert _validated(model, key, SITE[key]) != default, (
            f"group_data/all.py: {key} = {SITE[key]!r} restates the default of {model.__name__}.{key}: delete it there"
        )


def test_only_the_servers_have_no_default():
    with pytest.raises(ValidationError) as caught:
        HostData.model_validate({})
    assert sorted(error["loc"][0] for error in caught.value.errors()) == ["active_server", "servers_file"]


def test_a_repository_with_only_its_servers_deploys_what_this_one_does():
    """This repository's deployment is the defaults' plus its site choices: nothing else in all.py."""
    assert load_deployment("h", REQUIRED, PROJECT) == load_deployment("h", group_data("all"), PROJECT)


def test_the_lab_serves_what_the_defaults_pin():
    assert index.sim_metadata(layout.SIM_DIR)[0] == HostData.model_fields["sglang_version"].default
    assert layout.UV_VERSION == HostData.model_fields["uv_version"].default
