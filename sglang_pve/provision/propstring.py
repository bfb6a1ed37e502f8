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

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Format:
    """How PVE prints one property string: see render."""

    default_key: str | None = None
    required: tuple[str, ...] = ()
    filled_by_pve: frozenset[str] = frozenset()  # keys PVE adds when not given (a generated MAC, type=veth)
    booleans: frozenset[str] = frozenset()

    def normalized(self, value: str, compare_keys: set[str] | None = None) -> dict[str, str]:
        parsed = parse(value, self.default_key)
        return {
            k: boolean(v) if k in self.booleans else v
            for k, v in parsed.items()
            if compare_keys is None or k in compare_keys
        }


_FEATURES = ("force_rw_sys", "fuse", "keyctl", "mknod", "nesting")
FORMATS: dict[str, Format] = {
    "net": Format(required=("name",), filled_by_pve=frozenset({"type", "hwaddr"}), booleans=frozenset({"firewall"})),
    "dev": Format(default_key="path", booleans=frozenset({"deny-write"})),
    "features": Format(booleans=frozenset(_FEATURES)),
    "startup": Format(default_key="order"),
}


def format_of(key: str) -> Format | None:
    """The format of a config key's value (net0 -> FORMATS["net"]); None for a plain value."""
    return FORMATS.get(re.sub(r"\d+$", "", key))
