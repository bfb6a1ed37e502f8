"""The real PVE API schema (pve-docs' apidata: a tree of ``{path, info: {METHOD: {...}},
children}``), loaded at run time from ``<dir>/pve<version>-api-schema.json`` and never copied.

The directory is ``$SGLANG_PVE_PVE_SCHEMA_DIR``, default ``<repository root>/../shared/reference``.
"""

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote

SCHEMA_DIR_ENV = "SGLANG_PVE_PVE_SCHEMA_DIR"


def default_schema_dir() -> Path:
    if os.environ.get(SCHEMA_DIR_ENV):
        return Path(os.environ[SCHEMA_DIR_ENV])
    return Path(__file__).resolve().parents[2].parent / "shared" / "reference"


def schema_file(version: int, schema_dir=None) -> Path:
    return Path(schema_dir or default_schema_dir()) / f"pve{version}-api-schema.json"


class Route:
    """One path of the tree: its template, how to match a concrete path, its methods."""

    def __init__(self, template: str, methods: dict):
        self.template = template
        self.methods = methods
        self.segments = template.strip("/").split("/") if template != "/" else []
        self.literals = sum(1 for s in self.segments if not s.startswith("{"))

    def match(self, parts: list[str]) -> dict | None:
        if len(parts) != len(self.segments):
            return None
        params = {}
        for seg, part in zip(self.segments, parts, strict=True):
            if seg.startswith("{"):
                params[seg[1:-1]] = part
            elif seg != part:
                return None
        return params


class Schema:
    """``Schema.load(9).find("POST", "/nodes/pve1/lxc")`` -> (route, method info, path params)."""

    def __init__(self, tree: list, version: int):
        self.version = version
        self.routes: list[Route] = []
        stack = list(tree)
        while stack:
            node = stack.pop()
            self.routes.append(Route(node["path"], node.get("info", {})))
            stack.extend(node.get("children", []))
        # the most literal segments first: /lxc/{vmid}/status/current before /lxc/{vmid}/{x}/...
        self.routes.sort(key=lambda r: -r.literals)

    @classmethod
    def load(cls, version: int, schema_dir=None) -> "Schema":
        path = schema_file(version, schema_dir)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # apidata.js form too ("const apiSchema = [...];"), should someone point at that file
        text = re.sub(r"^[^\[]*", "", text, count=1).rstrip().rstrip(";")
        return cls(json.loads(text), version)

    def find(self, method: str, path: str):
        """The route for a concrete path (``/nodes/pve1/lxc/101/config``, percent-encoded
        segments decoded), its method info or None, and the path parameters; None when no
        route has this path at all."""
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        for route in self.routes:
            params = route.match(parts)
            if params is not None:
                return route, route.methods.get(method), params
        return None
