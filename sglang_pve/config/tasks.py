"""The --data keys of the release tasks (tasks/switch.py, tasks/rollback_release.py), validated
like host data (loaded with context.task_options): every problem at once, naming host, key,
value and the fix."""

from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglang_pve.config.deployment import Deployment
from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.problems import problems_from

_Options = TypeVar("_Options", bound=BaseModel)
RELEASE_ID = r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$"  # agent/release_store.py: <UTC time>-<fingerprint>


class SwitchOptions(BaseModel):
    """tasks/switch.py --data server=NAME"""

    model_config = ConfigDict(extra="ignore")
    server: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,47}$")


class RollbackOptions(BaseModel):
    """tasks/rollback.py [--data to=ID] [--data list=1]"""

    model_config = ConfigDict(extra="ignore")
    to: str | None = Field(None, pattern=RELEASE_ID)
    list: bool = False


def _validate(model: type[_Options], host_name: str, data: Mapping[str, object]) -> _Options:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(host_name, problems_from(exc, model)) from None


def switch_options(host_name: str, data: Mapping[str, object], deployment: Deployment) -> SwitchOptions:
    options = _validate(SwitchOptions, host_name, data)
    if options.server not in deployment.servers:
        raise ConfigError(
            host_name,
            [
                Problem(
                    "server",
                    options.server,
                    "no such server configuration",
                    f"use one of {', '.join(deployment.servers)}",
                )
            ],
        )
    return options


def rollback_options(host_name: str, data: Mapping[str, object], deployment: Deployment) -> RollbackOptions:
    return _validate(RollbackOptions, host_name, data)
