"""The --data keys of the release tasks (tasks/switch.py, tasks/rollback.py), validated like
host data: every problem at once, naming host, key, value and the fix."""

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError
from .problems import problems_from

RELEASE_ID = r"^\d{8}T\d{6}Z-[0-9a-f]{8}$"  # agent/releases.py: <UTC time>-<fingerprint>


class SwitchData(BaseModel):
    """tasks/switch.py --data server=NAME"""

    model_config = ConfigDict(extra="ignore")
    server: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")


class RollbackData(BaseModel):
    """tasks/rollback.py [--data to=ID] [--data list=1] (the release mode)"""

    model_config = ConfigDict(extra="ignore")
    to: str | None = Field(None, pattern=RELEASE_ID)
    list: bool = False


def task_data(model: type[BaseModel], host_name: str, data: dict):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(host_name, problems_from(exc, model)) from None
