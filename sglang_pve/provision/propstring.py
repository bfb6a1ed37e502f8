"""Proxmox property strings (``name=eth0,bridge=vmbr0,ip=10.0.0.5/24``), read and written the way
PVE prints them (pve-common JSONSchema::print_property_string): the default key's value bare and
first, then the required keys, then the rest sorted; booleans as 1/0.

>>> parse("/dev/nvidia0,mode=0666", default_key="path")
{'path': '/dev/nvidia0', 'mode': '0666'}
>>> render({"mode": "0666", "path": "/dev/nvidia0"}, default_key="path")
'/dev/nvidia0,mode=0666'
>>> render({"ip": "dhcp", "bridge": "vmbr0", "name": "eth0"}, required=("name",))
'name=eth0,bridge=vmbr0,ip=dhcp'
"""

_TRUE = {"1", "on", "yes", "true"}
_FALSE = {"0", "off", "no", "false"}


def parse(value: str, default_key: str | None = None) -> dict[str, str]:
    """key=value pairs of a property string; a bare item is the default key's value."""
    parsed: dict[str, str] = {}
    for item in filter(None, value.split(",")):
        key, sep, val = item.partition("=")
        if not sep:
            if default_key is None:
                raise ValueError(f"{item!r} has no key in {value!r}")
            key, val = default_key, item
        parsed[key.strip()] = val.strip()
    return parsed


def boolean(value: object) -> str:
    """PVE's parse_boolean, as the 1/0 it prints. True -> '1', 'on' -> '1', 0 -> '0'."""
    text = str(value).lower() if not isinstance(value, bool) else str(int(value))
    if text in _TRUE:
        return "1"
    if text in _FALSE:
        return "0"
    raise ValueError(f"not a boolean: {value!r}")


def render(values: dict[str, str], default_key: str | None = None, required: tuple[str, ...] = ()) -> str:
    items = [values[default_key]] if default_key in values else []
    head = [k for k in sorted(required) if k in values and k != default_key]
    rest = sorted(k for k in values if k != default_key and k not in required)
    return ",".join(items + [f"{k}={values[k]}" for k in head + rest])
