"""Parameter verification as pve-common's JSONSchema.pm does it (check_object / check_prop /
check_type / parse_property_string), with PVE's messages, against one method's ``parameters``.

Values are what the HTTP layer decoded: strings (form and query), or from a JSON body also
`bool` (JSON true/false, a Perl JSON::PP::Boolean), `list` and `dict` (Perl references); JSON
numbers are checked as their decimal text, as Perl sees a scalar. The dump collapses indexed keys (``dev[n]``); their ranges
come from pve-container (dev/mp/unused 0-255, net 0-31).

>>> schema = {"additionalProperties": 0, "properties": {"onboot": {"type": "boolean", "optional": 1},
...     "dev[n]": {"type": "string", "optional": 1, "format": {"path": {"type": "string",
...     "default_key": 1, "format": "pve-lxc-dev-string"}, "mode": {"type": "string",
...     "pattern": "0[0-7]{3}", "optional": 1}}}}}
>>> errors = verify(schema, {"onboot": "True", "dev0": "/dev/nvidia0,foo=1", "lxc.idmap": "u 0 1 1"})
>>> for key, message in errors.items():
...     print(f"{key}: {message!r}")
onboot: "type check ('boolean') failed - got 'True'"
dev0: 'invalid format - invalid key in comma-separated list property: foo\\n'
lxc.idmap: 'property is not defined in schema and the schema does not allow additional properties'
"""

import re

from . import formats

INDEX_RANGES = {"dev": 256, "mp": 256, "unused": 256, "net": 32}


class PropertyStringError(Exception):
    """parse_property_string's `raise "format error\\n", errors => {...}` (a PVE::Exception)."""

    def __init__(self, errors: dict):
        super().__init__("format error")
        self.errors = errors

    def __str__(self):  # PVE::Exception::stringify
        return "format error\n" + "".join(f"{k}: {v}\n" for k, v in self.errors.items())


def property_schema(properties: dict, key: str) -> dict | None:
    """The schema of ``key``, expanding ``name[n]`` entries for indexed keys like ``dev12``."""
    if key in properties:
        return properties[key]
    m = re.match(r"^([a-z]+)(\d+)$", key)
    if m and f"{m[1]}[n]" in properties and int(m[2]) < INDEX_RANGES.get(m[1], 256):
        if m[2] == str(int(m[2])):
            return properties[f"{m[1]}[n]"]
    return None


def _add_error(errors: dict, path: str, msg: str) -> None:
    path = path or "_root"
    errors[path] = f"{errors[path]}\\n{msg}" if path in errors else msg  # Perl's '\n' literal


def _is_number(v: str) -> bool:
    return bool(re.match(r"^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$", v))


def _perl_ref(value) -> str | None:
    """The Perl reference type a decoded JSON value would be, or None for a scalar."""
    if isinstance(value, bool):
        return "JSON::PP::Boolean"
    if isinstance(value, list):
        return "ARRAY"
    if isinstance(value, dict):
        return "HASH"
    return None


def _check_type(path, type_, value, errors) -> bool:
    if not type_ or type_ == "any":
        return True
    if isinstance(type_, list):
        if any(_check_type(path, t, value, {}) for t in type_):
            return True
        _add_error(errors, path, f"type check ('{'|'.join(type_)}') failed")
        return False
    ref = _perl_ref(value)
    if type_ in ("array", "object"):
        if ref != {"array": "ARRAY", "object": "HASH"}[type_]:
            _add_error(errors, path, f"type check ('{type_}') failed")
            return False
        return True
    if ref:
        if type_ == "boolean" and ref == "JSON::PP::Boolean":
            return True
        _add_error(errors, path, f"type check ('{type_}') failed - got {ref}")
        return False
    ok = {
        "boolean": lambda v: v in ("0", "1"),
        "integer": lambda v: bool(re.match(r"^[+-]?\d+$", v)),
        "number": _is_number,
    }.get(type_, lambda v: True)
    if not ok(value):
        _add_error(errors, path, f"type check ('{type_}') failed - got '{value}'")
        return False
    return True


def perl_pattern(pattern: str) -> str:
    """A stringified Perl qr// as a Python regex: ``(?^:`` (default flags) is ``(?:``."""
    return pattern.replace("(?^:", "(?:")


def check_prop(value, schema: dict, path: str, errors: dict) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(value)  # a decoded JSON number: a Perl scalar, checked as its text
    if value is None:
        if schema.get("type") != "null" and not schema.get("optional"):
            _add_error(errors, path, "property is missing and it is not optional")
        return
    if not _check_type(path, schema.get("type"), value, errors):
        return
    if isinstance(value, (list, dict, bool)):
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                check_prop(item, schema["items"], f"{path}[{i}]", errors)
        elif isinstance(value, dict) and ("properties" in schema or "additionalProperties" in schema):
            check_object(path, schema.get("properties", {}), value, schema.get("additionalProperties"), errors)
        return
    if fmt := schema.get("format"):
        try:
            if isinstance(fmt, dict):
                parse_property_string(fmt, value, path)
            else:
                formats.check(fmt, value)
        except PropertyStringError as e:
            _add_error(errors, path, f"invalid format - {e}")
            return
        except formats.FormatError as e:
            _add_error(errors, path, f"invalid format - {e}\n")
            return
    if (pattern := schema.get("pattern")) and not re.match(f"^{perl_pattern(pattern)}$", value):
        _add_error(errors, path, "value does not match the regex pattern")
        return
    if (mx := schema.get("maxLength")) is not None and len(value) > int(mx):
        _add_error(errors, path, f"value may only be {mx} characters long")
        return
    if (mn := schema.get("minLength")) is not None and len(value) < int(mn):
        _add_error(errors, path, f"value must be at least {mn} characters long")
        return
    if _is_number(value):
        if (mx := schema.get("maximum")) is not None and float(value) > float(mx):
            _add_error(errors, path, f"value must have a maximum value of {mx}")
            return
        if (mn := schema.get("minimum")) is not None and float(value) < float(mn):
            _add_error(errors, path, f"value must have a minimum value of {mn}")
            return
    if (enum := schema.get("enum")) and value not in enum:
        _add_error(errors, path, f"value '{value}' does not have a value in the enumeration '{', '.join(enum)}'")


def check_object(path: str, properties: dict, value: dict, additional, errors: dict) -> None:
    for key, schema in properties.items():
        if not key.endswith("[n]"):
            check_prop(value.get(key), schema, f"{path}.{key}" if path else key, errors)
    for key, item in value.items():
        newpath = f"{path}.{key}" if path else key
        schema = property_schema(properties, key)
        if schema is not None:
            if key not in properties:  # an expanded indexed key: checked here
                check_prop(item, schema, newpath, errors)
            requires = schema.get("requires")
            if isinstance(requires, str) and value.get(requires) is None:
                _add_error(
                    errors, f"{path}.{requires}" if path else requires, f"missing property required by '{newpath}'"
                )
            continue
        if additional is not None and not additional:
            _add_error(
                errors, newpath, "property is not defined in schema and the schema does not allow additional properties"
            )
        elif isinstance(additional, dict):
            check_prop(item, additional, newpath, errors)


def parse_boolean(text: str) -> str | None:
    """PVE::JSONSchema::parse_boolean, as '1'/'0' (None when it is no boolean)."""
    if re.match(r"^(1|on|yes|true)$", text, re.I):
        return "1"
    if re.match(r"^(0|off|no|false)$", text, re.I):
        return "0"
    return None


def parse_property_string(fmt: dict, data: str, path: str = "") -> dict:
    """``k=v,k2=v2`` (with the default key's ``k=`` optional) -> dict, PVE's errors."""
    res: dict = {}
    default_key = None
    for part in data.split(","):
        if re.match(r"^\s*$", part):
            continue
        if m := re.match(r"^([^=]+)=(.+)$", part, re.S):
            key, val = m[1], m[2]
            if key in res:
                raise formats.FormatError(f"duplicate key in comma-separated list property: {key}")
            schema = fmt.get(key)
            if schema is None:
                raise formats.FormatError(f"invalid key in comma-separated list property: {key}")
            if schema.get("type") == "boolean":
                val = parse_boolean(val) or val
            res[key] = val
        elif "=" not in part:
            if default_key:
                raise formats.FormatError(f"duplicate key in comma-separated list property: {default_key}")
            default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
            if default_key is None:
                raise formats.FormatError("value without key, but schema does not define a default key")
            if default_key in res:
                raise formats.FormatError(f"duplicate key in comma-separated list property: {default_key}")
            if fmt[default_key].get("type") == "boolean":
                part = parse_boolean(part) or part
            res[default_key] = part
        else:
            raise formats.FormatError("missing key in comma-separated list property")
    errors: dict = {}
    check_object(path, fmt, res, 0, errors)
    if errors:
        raise PropertyStringError(errors)
    return res


def verify(parameters: dict, values: dict) -> dict:
    """Errors ({param: message}, empty when valid) of ``values`` against a method's
    ``parameters`` schema (``{"additionalProperties": 0, "properties": {...}}``)."""
    errors: dict = {}
    check_object("", parameters.get("properties", {}), values, parameters.get("additionalProperties"), errors)
    return errors
