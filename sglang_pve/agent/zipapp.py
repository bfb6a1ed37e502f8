"""The agent as ONE deterministic zipapp: same sources, same bytes (so a redeploy is a no-op).

    from sglang_pve.agent import zipapp
    data = zipapp.build()            # bytes of sglang-pve-agent.pyz
    python3 -m sglang_pve.agent.zipapp /tmp/sglang-pve-agent.pyz

Contents: `__main__.py` (calls sglang_pve.agent.cli.main()), `sglang_pve/__init__.py` and every
`sglang_pve/agent/**/*.py`, sorted, with a fixed timestamp (1980-01-01) and mode 0644, stored
uncompressed: deflate output may differ between zlib builds, i.e. between controllers.
It runs with any python3 >= 3.11 and nothing else: `/usr/bin/python3 sglang-pve-agent.pyz --help`.
"""

import io
import os
import sys
import zipfile

MAIN = b'''"""sglang-pve lifecycle agent (built by sglang_pve.agent.zipapp)."""

from sglang_pve.agent.cli import main

raise SystemExit(main())
'''
_EPOCH = (1980, 1, 1, 0, 0, 0)
_AGENT_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(_AGENT_DIR))


def sources() -> list[tuple[str, str]]:
    """(archive name, path) of every file that goes into the zipapp, sorted by name."""
    files = [("sglang_pve/__init__.py", os.path.join(_PACKAGE_ROOT, "sglang_pve", "__init__.py"))]
    for directory, subdirs, names in os.walk(_AGENT_DIR):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                files.append((os.path.relpath(path, _PACKAGE_ROOT).replace(os.sep, "/"), path))
    return sorted(files)


def build() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        _add(archive, "__main__.py", MAIN)
        for name, path in sources():
            with open(path, "rb") as handle:
                _add(archive, name, handle.read())
    return buffer.getvalue()


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # Unix, so the mode below is honoured
    info.external_attr = 0o100644 << 16
    archive.writestr(info, data)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 -m sglang_pve.agent.zipapp OUTPUT.pyz")
    with open(sys.argv[1], "wb") as out:
        out.write(build())
