"""``python3 -m lab.pve serve ...``: the emulator as pve1's API service (see README.md)."""

import argparse
import importlib
import json
import sys

from .auth import is_private, load_credentials
from .backend import DirBackend
from .node import VERSIONS, Node
from .schema import Schema, default_schema_dir
from .server import Emulator
from .storage import Storages

BACKENDS = {"guestd": ".guestd:GuestdBackend"}  # the lab's real-LXC backend (lab side)


def make_backend(name: str, options: dict):
    """``dir`` (DirBackend), ``guestd``, or any ``package.module:Class`` built with options."""
    if name == "dir":
        return DirBackend(**options)
    spec = BACKENDS.get(name, name)
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module, __package__), cls)(**options)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m lab.pve", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the PVE API over HTTPS")
    s.add_argument(
        "--version",
        type=int,
        choices=sorted(VERSIONS),
        required=True,
        help="emulated PVE major version (schema, defaults)",
    )
    s.add_argument("--node", default="pve1")
    s.add_argument("--state-root", default="/etc/pve", help="holds nodes/<node>/lxc/<vmid>.conf")
    s.add_argument(
        "--schema-dir", default=None, help=f"folder of pve8/pve9-api-schema.json (default {default_schema_dir()})"
    )
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--credentials", required=True, help="root-only JSON (auth.py)")
    s.add_argument("--request-log", default=None)
    s.add_argument("--faults", default=None, help="fault rules, re-read per request")
    s.add_argument("--storage", default=None, help="storage table JSON (storage.py)")
    s.add_argument("--zfs-state", default=None, help="the zfspool datasets' snapshots (zfs.py; shared with `zfs`)")
    s.add_argument("--backend", default="dir")
    s.add_argument("--backend-options", default="{}", help="JSON keyword arguments")
    s.add_argument("--listen", default="0.0.0.0")
    s.add_argument("--port", type=int, default=8006)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if not is_private(args.credentials):
        print(f"refusing {args.credentials}: readable by group/others (chmod 600 it)", file=sys.stderr)
        return 2
    schema = Schema.load(args.version, args.schema_dir)
    backend = make_backend(args.backend, json.loads(args.backend_options))
    storages = Storages.from_file(args.storage, args.zfs_state) if args.storage else Storages(zfs_state=args.zfs_state)
    node = Node(args.node, args.version, args.state_root, backend, storages)
    emulator = Emulator(node, schema, load_credentials(args.credentials), args.request_log, args.faults)
    server = emulator.make_server(args.listen, args.port, args.cert, args.key)
    print(
        f"PVE {args.version} API emulator for node {args.node} on https://{args.listen}:"
        f"{args.port}/api2/json ({len(schema.routes)} schema paths)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
