"""Secrets: named in data by where the controller reads them, never by value.

    {"env": "SGLANG_API_KEY"}                 an environment variable of the pyinfra process
    {"file": "~/.config/sglang-pve/api-key"}  a regular file only its owner can read (0600)

A Secret never shows its value in a repr, a str, a Problem, a diff or a command line; the deploy
writes it only into root-only files on the host (sglang_pve.deploy.render.server_files).

    source = SecretSource(env="HF_TOKEN")
    secret, problem = read_secret("sglang_secrets.env.HF_TOKEN", source)
    str(secret)  # "<secret from environment variable HF_TOKEN>"
"""

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sglang_pve.config.errors import HIDDEN, Problem

# Printable ASCII without blanks, quotes, backslash, $ and backtick: a value that every file format
# it lands in (an EnvironmentFile, SGLang's YAML, pip's config) takes literally.
_VALUE = re.compile(r"[A-Za-z0-9._~+/=:@!#%^&*,;?(){}\[\]<>|-]{1,4096}")
ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"


class SecretSource(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    env: str | None = Field(None, pattern=ENV_NAME)
    # a path, absolute or ~/: a token pasted here fails as "not a valid path" (problems.py hides it)
    file: str | None = Field(None, pattern=r"^(/|~/)[^\x00-\x1f\x7f]{0,1022}$")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.env is None) == (self.file is None):
            raise ValueError('name exactly one source: {"env": "VARIABLE"} or {"file": "/path/to/0600-file"}')
        return self

    def describe(self) -> str:
        return f"environment variable {self.env}" if self.env else f"file {self.file}"


@dataclass(frozen=True)
class Secret:
    value: str = field(repr=False)
    source: str

    def __str__(self) -> str:
        return f"<secret from {self.source}>"

    __repr__ = __str__


def from_env(key: str, name: str, environ: Mapping[str, str] = os.environ) -> tuple[str | None, Problem | None]:
    value = environ.get(name, "").strip()
    if not value:
        return None, Problem(
            key,
            name,
            "the environment variable is not set (or empty)",
            f"export {name}=... before running pyinfra (or use a 0600 file instead)",
        )
    return value, None


def from_file(key: str, path: str) -> tuple[str | None, Problem | None]:
    try:
        info = os.stat(path)
    except OSError as error:
        return None, Problem(
            key,
            path,
            f"cannot read it ({error.strerror})",
            f"create it with only the secret in it, then chmod 600 {path}",
        )
    if not stat.S_ISREG(info.st_mode):
        return None, Problem(key, path, "not a regular file", "point at a file holding only the secret")
    if info.st_mode & 0o077:
        return None, Problem(
            key,
            path,
            f"readable by others than its owner (mode {stat.S_IMODE(info.st_mode):04o}): a secret must not be",
            f"chmod 600 {path}",
        )
    with open(path, encoding="utf-8") as handle:
        value = handle.read().strip()
    if not value:
        return None, Problem(key, path, "the file is empty", "write the secret into it")
    return value, None


def read_secret(
    key: str, source: SecretSource, environ: Mapping[str, str] = os.environ
) -> tuple[Secret | None, Problem | None]:
    """The secret `source` names, or a Problem naming the variable or file (never the value)."""
    if source.env:
        value, problem = from_env(key, source.env, environ)
    else:
        assert source.file is not None  # SecretSource._exactly_one
        value, problem = from_file(key, str(Path(source.file).expanduser()))
    if value is None:  # from_env and from_file give a value or a problem
        return None, problem
    if not _VALUE.fullmatch(value):
        return None, Problem(
            key,
            HIDDEN,
            f"the secret from {source.describe()} has characters a config file would not take "
            "literally (blanks, quotes, backslash, $ or `), or is longer than 4096",
            "use printable ASCII without those (e.g. from `openssl rand -hex 32`)",
        )
    return Secret(value, source.describe()), None


class SecretsData(BaseModel):
    """`sglang_secrets` in host data: SGLang's keys and secret environment of every server unit."""

    model_config = ConfigDict(extra="forbid", strict=True)
    api_key: SecretSource | None = Field(None, alias="api-key")
    admin_api_key: SecretSource | None = Field(None, alias="admin-api-key")
    env: dict[Annotated[str, Field(pattern=ENV_NAME)], SecretSource] = {}


@dataclass(frozen=True)
class ServerSecrets:
    """The secrets read on the controller; `flags` go into the root-only copy of SGLang's config,
    `env` into the root-only EnvironmentFile of each unit."""

    flags: dict[str, Secret] = field(default_factory=dict)  # {"api-key": Secret, "admin-api-key": Secret}
    env: dict[str, Secret] = field(default_factory=dict)

    @property
    def api_key(self) -> Secret | None:
        return self.flags.get("api-key")


def read_secrets(data: SecretsData, environ: Mapping[str, str] = os.environ) -> tuple[ServerSecrets, list[Problem]]:
    """Every secret `data` names, read now; every problem at once (sources named, never values)."""
    flags: dict[str, Secret] = {}
    env: dict[str, Secret] = {}
    problems: list[Problem] = []
    named: list[tuple[str, dict[str, Secret], str, SecretSource | None]] = [
        (f"sglang_secrets.{flag}", flags, flag, getattr(data, flag.replace("-", "_")))
        for flag in ("api-key", "admin-api-key")
    ]
    named += [(f"sglang_secrets.env.{name}", env, name, source) for name, source in data.env.items()]
    for key, into, name, source in named:
        if source is None:
            continue
        secret, problem = read_secret(key, source, environ)
        if problem:
            problems.append(problem)
        else:
            assert secret is not None  # read_secret gives a secret or a problem
            into[name] = secret
    return ServerSecrets(flags, env), problems
