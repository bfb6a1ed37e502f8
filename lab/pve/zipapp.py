"""The emulator as one deterministic zipapp for pve1 (same sources, same bytes):

    python3 -m lab.pve.zipapp /tmp/pve-emulator.pyz
    python3 /tmp/pve-emulator.pyz serve --version 9 ...

The package goes in as ``pve`` (relative imports only), so it also runs copied as a directory:
``cp -r lab/pve /opt/x/pve && cd /opt/x && python3 -m pve serve ...``.
"""

import io
import sys
import zipfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
MAIN = b'''"""Proxmox VE API emulator (built by lab.pve.zipapp)."""
import sys

from pve.cli import main

sys.exit(main())
'''


def build() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:

        def add(name, data):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)

        add("__main__.py", MAIN)
        for path in sorted(PACKAGE_DIR.glob("*.py")):
            add(f"pve/{path.name}", path.read_bytes())
    return b"#!/usr/bin/env python3\n" + buf.getvalue()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 -m lab.pve.zipapp OUTPUT.pyz")
    Path(sys.argv[1]).write_bytes(build())
