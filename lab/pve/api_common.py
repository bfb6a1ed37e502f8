"""Helpers shared by the container endpoints."""

import re

from . import rules
from .node import Node, Request
from .validate import parse_boolean, property_schema


def ct_vmid(node: Node, req: Request) -> int:
    node.check_node(req.params["node"])
    return int(req.params["vmid"])


def is_mountpoint(key: str) -> bool:
    return key == "rootfs" or bool(re.match(r"^mp\d+$", key))


def volumes(section: dict) -> list[str]:
    """The volumes of a config section's mount points (foreach_volume: rootfs, mpN), paths left out."""
    found = (rules.mp_volume(v) for k, v in sorted(section.items()) if is_mountpoint(k))
    return [v for v in found if rules.mountpoint_type(v) == "volume"]


def typed(section: dict, returns: dict) -> dict:
    """Config values as PVE's GET returns them: integers/booleans/numbers as JSON numbers
    (PVE::LXC::Config->check_type on parse), everything else as written."""
    props = returns.get("properties", {})
    out = {}
    for key, value in section.items():
        schema = property_schema(props, key) or {}
        kind = schema.get("type")
        if kind in ("integer", "boolean") and re.match(r"^[+-]?\d+$", str(value)):
            value = int(value)
        elif kind == "boolean" and parse_boolean(str(value)) is not None:
            value = int(parse_boolean(str(value)))
        elif kind == "number" and re.match(r"^[+-]?\d+(\.\d+)?$", str(value)):
            value = float(value) if "." in str(value) else int(value)
        out[key] = value
    return out


def plain(section: dict) -> dict:
    """A section as the backend gets it: {key: value} with lxc as (key, value) pairs."""
    out = {k: v for k, v in section.items() if k != "lxc"}
    out["lxc"] = [tuple(kv) for kv in section.get("lxc", [])]
    return out
