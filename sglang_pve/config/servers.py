"""Server configurations: `defaults:` + per-server overrides from servers.yml, validated."""

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sglang_pve.agent import contract
from sglang_pve.config.errors import HIDDEN, Problem
from sglang_pve.config.lifecycle import Lifecycle
from sglang_pve.config.problems import problems_from
from sglang_pve.config.safe import control_characters
from sglang_pve.config.sglang_args import RENAMED, SECRET_FLAGS, SGLangArgs, check_speculative, check_supported

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
# Variables that change which code a process loads: refused unless `allow_env:` names them.
LOADER_ENV = re.compile(r"LD_[A-Z0-9_]*|PYTHON[A-Z0-9_]*|PATH|BASH_ENV|ENV")
# The toolkit's own (the root agent obeys SGLANG_PVE_* overrides): never from configuration.
OWN_ENV = re.compile(r"SGLANG_PVE_[A-Z0-9_]*")
SECRET_ENV = re.compile(r".*(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|CREDENTIAL).*")
_BLOCKS = ("env", "allow_env", "lifecycle")  # keys of a server configuration that are not SGLang flags
# A mapping as yaml.safe_load (or --data) gives it: keys and values of any YAML type, checked here.
YamlMapping = dict[Any, Any]


@dataclass(frozen=True)
class ServerConfig:
    name: str
    args: SGLangArgs
    env: dict[str, str]  # extra unit environment, e.g. SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN
    lifecycle: Lifecycle


def deep_merge(base: YamlMapping, overlay: YamlMapping) -> YamlMapping:
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = (
            deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


# text -> what yaml.safe_load made of it: a run validates every host's data, several times per host
# (the deploy, the replica sets, the TP groups, the connector), against the same one file
_parsed: dict[str, object] = {}


def _load_yaml(path: Path) -> object:
    """yaml.safe_load of the file, parsed once per text (a copy each call: callers merge into it)."""
    text = path.read_text()
    if text not in _parsed:
        if len(_parsed) >= 8:  # a run has a file or a few: a long-lived caller keeps the newest
            del _parsed[next(iter(_parsed))]
        _parsed[text] = yaml.safe_load(text)
    return copy.deepcopy(_parsed[text])


def read_servers_file(path: Path) -> tuple[YamlMapping, list[Problem]]:
    try:
        document = _load_yaml(path)
    except OSError as exc:
        return {}, [
            Problem(
                "servers_file",
                str(path),
                f"cannot read it ({exc.strerror})",
                "point servers_file at a readable YAML file",
            )
        ]
    except yaml.YAMLError as exc:
        return {}, [
            Problem("servers_file", str(path), f"not valid YAML ({exc})", "fix the YAML syntax at the position shown")
        ]
    if not isinstance(document, dict) or not isinstance(document.get("servers"), dict) or not document["servers"]:
        return {}, [
            Problem("servers_file", str(path), "needs a non-empty `servers:` mapping", "add servers: {name: {...}}")
        ]
    unknown = set(document) - {"defaults", "servers"}
    if unknown:
        return {}, [
            Problem(
                f"servers_file.{sorted(unknown)[0]}", None, "unknown top-level key", "keep only defaults: and servers:"
            )
        ]
    return document, []


def env_name_problem(where: str, name: object, allowed: list[str], value: object = HIDDEN) -> Problem | None:
    """Why `name` may not be set in a server's environment, or None."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return Problem(where, value, "not a valid environment variable name", "use UPPER_CASE letters, digits and _")
    if name.startswith("NCCL_"):
        return Problem(
            where, value, "NCCL variables come from the active NCCL profile only", "set it in nccl_profiles instead"
        )
    if OWN_ENV.fullmatch(name):
        return Problem(where, value, "the toolkit's own variables are set by the toolkit only", "remove it")
    if LOADER_ENV.fullmatch(name) and name not in allowed:
        return Problem(
            where, value, "changes which code the server loads", f"remove it, or allow it by name: allow_env: [{name}]"
        )
    return None


def _check_env(key: str, env: object, allowed: object) -> tuple[dict[str, str], list[Problem]]:
    if not isinstance(env, dict):
        return {}, [Problem(key, env, "expected a mapping of VARIABLE: value", "write env: {NAME: value}")]
    if not isinstance(allowed, list) or not all(isinstance(n, str) and LOADER_ENV.fullmatch(n) for n in allowed):
        return {}, [
            Problem(
                key.replace(".env", ".allow_env"),
                allowed,
                "expected a list of loader variables to allow",
                "name each one, e.g. allow_env: [LD_LIBRARY_PATH]",
            )
        ]
    problems = []
    for name, value in env.items():
        where = f"{key}.{name}"
        if SECRET_ENV.fullmatch(str(name)):
            problems.append(
                Problem(
                    where,
                    HIDDEN,
                    "looks like a secret, and env: lands in the unit file",
                    f"give it in sglang_secrets.env.{name} (a file or variable on the controller) instead",
                )
            )
        elif problem := env_name_problem(where, name, allowed, value):
            problems.append(problem)
        elif isinstance(value, (dict, list)) or value is None:
            problems.append(Problem(where, value, "expected a scalar value", "write a string or a number"))
        elif control_characters(str(value)):
            problems.append(
                Problem(
                    where,
                    value,
                    f"value {control_characters(str(value))}",
                    "write it on one line without control characters",
                )
            )
    return {k: str(int(v) if isinstance(v, bool) else v) for k, v in env.items()}, problems


def build_server(
    name: object, raw: YamlMapping, base_lifecycle: YamlMapping
) -> tuple[ServerConfig | None, list[Problem]]:
    key = f"servers.{name}"
    if not isinstance(name, str) or not contract.SERVER_NAME.fullmatch(name):
        return None, [Problem(key, name, "not usable in a systemd unit name", f"use {contract.SERVER_NAME_RULE}")]
    flags = {k: v for k, v in raw.items() if k not in _BLOCKS}
    problems = [
        Problem(
            f"{key}.{flag}",
            HIDDEN if flag in SECRET_FLAGS else flags.pop(flag),
            "deprecated or renamed flag",
            f"use {RENAMED[flag]}",
        )
        for flag in list(flags)
        if flag in RENAMED
    ]
    for flag in SECRET_FLAGS:
        flags.pop(flag, None)
    env, env_problems = _check_env(f"{key}.env", raw.get("env", {}), raw.get("allow_env", []))
    problems += env_problems
    try:
        args = SGLangArgs.model_validate(flags)
    except ValidationError as exc:
        problems += problems_from(exc, SGLangArgs, f"{key}.")
        args = None
    try:
        lifecycle = Lifecycle.model_validate(deep_merge(base_lifecycle, raw.get("lifecycle") or {}))
    except ValidationError as exc:
        problems += problems_from(exc, Lifecycle, f"{key}.lifecycle.")
        lifecycle = None
    if args is not None:
        problems += check_speculative(args, key) + check_supported(args, key)
    if problems:
        return None, problems
    assert args is not None  # a failed validation added a problem
    return ServerConfig(name, args, env, lifecycle), []


def build_servers(document: YamlMapping, base_lifecycle: YamlMapping) -> tuple[dict[str, ServerConfig], list[Problem]]:
    """Merge `defaults:` under every server and validate each; all problems at once."""
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, dict):
        return {}, [Problem("servers_file.defaults", defaults, "expected a mapping", "write defaults: {flag: value}")]
    servers, problems = {}, []
    for name, overrides in document["servers"].items():
        if not isinstance(overrides, dict | None):
            problems.append(
                Problem(
                    f"servers.{name}",
                    overrides,
                    "expected a mapping of overrides",
                    "write name: {flag: value} or name: {}",
                )
            )
            continue
        server, found = build_server(name, deep_merge(defaults, overrides or {}), base_lifecycle)
        problems += found
        if server:
            servers[name] = server
    return servers, problems
