"""The `lifecycle:` block of a server configuration: deadlines and the liveness watchdog.

Never passed to SGLang; rendered into the unit (TimeoutStartSec=...) and into the agent's spec.
The schema, defaults and bounds are the agent's (sglang_pve/agent/spec.py): these pydantic
models are derived from its dataclasses, so the deploy accepts exactly what the agent reads.
"""

import dataclasses
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from sglang_pve.agent import spec

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def model_of(schema: type[spec.Dataclass]) -> type[BaseModel]:
    """A strict pydantic model with the fields, defaults and bounds of an agent dataclass."""
    fields: dict[str, Any] = {}  # name: (type, default); Any, since **fields also meets __config__ for mypy
    for field in dataclasses.fields(schema):
        if isinstance(field.type, type) and dataclasses.is_dataclass(field.type):
            nested = model_of(field.type)
            fields[field.name] = (nested, nested())
        else:
            bounds = {key: field.metadata[key] for key in ("gt", "ge", "le") if key in field.metadata}
            fields[field.name] = (field.type, Field(field.default, **bounds))
    return create_model(schema.__name__, __config__=_STRICT, __doc__=schema.__doc__, **fields)


class Lifecycle(model_of(spec.Lifecycle)):  # type: ignore[misc]  # built at import from the agent's schema
    @model_validator(mode="after")
    def _startup_covers_a_phase(self) -> Self:
        longest = max(self.stall_timeout_s.model_dump().values())
        if self.startup_timeout_s < longest:
            raise ValueError(
                f"startup_timeout_s ({self.startup_timeout_s}) is shorter than the longest stall timeout ({longest})"
            )
        return self

    @model_validator(mode="after")
    def _crash_restart_has_a_cap(self) -> Self:
        """restart_on_crash with max_restarts 0 would promise restarts the cap never allows."""
        watchdog = self.watchdog
        if watchdog.restart_on_crash and watchdog.max_restarts == 0:
            raise ValueError(
                "watchdog.restart_on_crash is true but watchdog.max_restarts is 0, so no crash could be "
                "restarted; fix: set watchdog.max_restarts >= 1, or watchdog.restart_on_crash: false"
            )
        if watchdog.backoff_max_s < watchdog.backoff_s:
            raise ValueError(
                f"watchdog.backoff_max_s ({watchdog.backoff_max_s:g}) is below watchdog.backoff_s "
                f"({watchdog.backoff_s:g}): every restart would wait backoff_max_s; fix: raise backoff_max_s"
            )
        return self
