"""Turn pydantic validation errors into Problems a person can act on."""

from difflib import get_close_matches

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from sglang_pve.config.errors import HIDDEN, Problem
from sglang_pve.config.indexes import masked

# and *_env, *_file; a login names an account (a token pasted there must not be echoed either)
_NAME_FIELDS = {"env": "environment variable name", "file": "path", "ssh_key": "path", "login": "login name"}
# Sections made of secret sources (config/secrets.py): a value there that fails validation is most
# likely the secret itself, pasted where its source belongs (sglang_secrets: {api-key: sk-...}).
_SECRET_SECTIONS = ("sglang_secrets", "sglang_index_credentials")
_SECRET_SOURCE_FIX = 'name where the controller reads it, {"env": "VARIABLE"} or {"file": "/path/to/0600-file"}'


def _fix(error: ErrorDetails, known: list[str]) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        if "_" in name and name.replace("_", "-") in known:
            return f"use the canonical dashed name {name.replace('_', '-')}"
        close = get_close_matches(name, known, n=1, cutoff=0.6)
        return f"did you mean {close[0]}?" if close else "remove it (see the list of supported keys in the docs)"
    if kind == "missing":
        return "add this key"
    bounds = {
        "greater_than": "use a value > {gt}",
        "greater_than_equal": "use a value >= {ge}",
        "less_than": "use a value < {lt}",
        "less_than_equal": "use a value <= {le}",
        "literal_error": "use one of {expected}",
        "string_pattern_mismatch": "use a value matching {pattern}",
    }
    if kind in bounds:
        return bounds[kind].format(**ctx)
    return {
        "int_type": "write a plain integer",
        "float_type": "write a number",
        "bool_type": "write true or false",
        "string_type": "write a string (quote it in YAML, or as --data 'key=\"value\"')",
        "dict_type": "write a mapping",
        "list_type": "write a list",
    }.get(kind, "correct the value")


def _names(loc: tuple[int | str, ...]) -> str | None:
    """What a field at `loc` names (an environment variable, a path), or None for a value field.
    A secret pasted where its name belongs (password_env: s3cret) must not be echoed back."""
    field = str(loc[-2] if loc and loc[-1] == "[key]" and len(loc) > 1 else loc[-1] if loc else "")
    if loc and loc[-1] == "[key]":
        return "environment variable name" if field == "env" else "name"
    for suffix, what in (("_env", "environment variable name"), ("_file", "path")):
        if field.endswith(suffix):
            return what
    return _NAME_FIELDS.get(field)


def problems_from(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> list[Problem]:
    """One Problem per pydantic error, keyed by its dotted location under `prefix`; a field that
    names something (an environment variable, a path) is refused without its value."""
    known = [f.alias or n for n, f in model.model_fields.items()]
    problems = []
    for error in exc.errors():
        loc = error["loc"]
        names = _names(loc) if error["type"] not in ("missing", "extra_forbidden") else None
        if names:
            key = ".".join(str(part) for part in (loc[:-2] if loc[-1] == "[key]" else loc))
            fix = _fix(error, known) if loc[-1] != "[key]" else "use letters, digits and _"
            problems.append(Problem(f"{prefix}{key}", HIDDEN, f"not a valid {names} (value not shown)", fix))
            continue
        key = ".".join(str(part) for part in loc)
        value = error.get("input") if error["type"] != "missing" else None
        if loc and str(loc[0]) in _SECRET_SECTIONS and error["type"] != "missing":
            fix = _SECRET_SOURCE_FIX if isinstance(value, str) else _fix(error, known)
            message = (
                "unknown key" if error["type"] == "extra_forbidden" else error["msg"].removeprefix("Value error, ")
            )
            problems.append(Problem(f"{prefix}{key}", HIDDEN, f"{message} (value not shown)", fix))
            continue
        if isinstance(value, str) and "://" in value:  # a URL with user:token@ is shown masked
            value = masked(value)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        problems.append(Problem(f"{prefix}{key}" if key else prefix.rstrip("."), value, message, _fix(error, known)))
    return problems
