"""The agent as ONE deterministic zipapp: same sources, same bytes (so a redeploy is a no-op).

    from sglang_pve.agent import zipapp
    data = zipapp.build()            # bytes of sglang-pve-agent.pyz
    python3 -m sglang_pve.agent.zipapp /tmp/sglang-pve-agent.pyz

Contents: `__main__.py` (calls sglang_pve.agent.cli.main()), `sglang_pve/__init__.py` and every
`sglang_pve/agent/**/*.py`, sorted, with a fixed timestamp (1980-01-01) and mode 0644, stored
uncompressed: deflate output may differ between zlib builds, i.e. between controllers.
It runs with any python3 >= 3.11 and nothing else: `/usr/bin/python3 sglang-pve-agent.pyz --help`.

Compiled: zipimport writes no bytecode cache, so every start compiled each module it imports (30 ms
of an 0.1 s `releases`). `agent compile` (the deploy runs it when it installs a new agent) writes,
beside the zipapp, a copy of it with every module also compiled for the interpreter that ran it
(unchecked hash-based .pyc, PEP 552, which zipimport reads before the .py), named by the build
(BUILD: the sources' digest) and the interpreter's cache tag. `__main__.py` runs from that copy
when it is there, else from itself as before: a copy of another build or interpreter is never
taken, and one missing costs only the compile.
"""

import hashlib
import importlib.util
import io
import marshal
import os
import sys
import zipfile

from sglang_pve.agent import state

COPY = ".{zipapp}.{build}.{tag}.zip"  # a compiled copy's name, beside the zipapp
# `__main__.py` (COPY and BUILD filled in): it imports nothing of the agent before it chose where
# from, or that would come from the zipapp itself
MAIN = """\"\"\"sglang-pve lifecycle agent (built by sglang_pve.agent.zipapp).\"\"\"

import os
import sys

_here = sys.path[0]
_name = %r.format(zipapp=os.path.basename(_here), build=%r, tag=sys.implementation.cache_tag)
_copy = os.path.join(os.path.dirname(_here), _name)
if os.path.isfile(_copy):  # this build, compiled for this interpreter by `agent compile`
    sys.path[0] = _copy

from sglang_pve.agent.cli import main  # noqa: E402

raise SystemExit(main())
"""
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
    files = []
    for name, path in sources():
        with open(path, "rb") as handle:
            files.append((name, handle.read()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        _add(archive, "__main__.py", (MAIN % (COPY, build_id(files))).encode())
        for name, data in files:
            _add(archive, name, data)
    return buffer.getvalue()


def build_id(files: list[tuple[str, bytes]]) -> str:
    """The build's name: the digest of its sources (archive name, bytes), __main__.py apart."""
    digest = hashlib.sha256()
    for name, data in files:
        if name != "__main__.py" and name.endswith(".py"):
            digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:16]


def compiled_path(zipapp: str, build: str) -> str:
    """The compiled copy of `zipapp` (a path) for `build` and this interpreter."""
    name = COPY.format(zipapp=os.path.basename(zipapp), build=build, tag=sys.implementation.cache_tag)
    return os.path.join(os.path.dirname(zipapp), name)


def compile_copy(zipapp: str) -> str:
    """Write the compiled copy of `zipapp` beside it (atomically, 0644) and remove the copies of
    other builds or interpreters (COPY's names for this zipapp); its path."""
    with zipfile.ZipFile(zipapp) as source:
        files = [(name, source.read(name)) for name in source.namelist()]
    target = compiled_path(zipapp, build_id(files))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files:
            _add(archive, name, data)
            if name.endswith(".py") and name != "__main__.py":
                code = compile(data, f"{target}/{name}", "exec", dont_inherit=True)
                unchecked = (0b01).to_bytes(4, "little")  # PEP 552: hash-based, its source not checked
                header = importlib.util.MAGIC_NUMBER + unchecked + importlib.util.source_hash(data)
                _add(archive, name[:-3] + ".pyc", header + marshal.dumps(code))
    state.write_atomic(target, buffer.getvalue(), mode=0o644)
    directory, mine = os.path.dirname(target), COPY.split("{build}")[0].format(zipapp=os.path.basename(zipapp))
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if entry.startswith(mine) and entry.endswith(".zip") and path != target and not os.path.islink(path):
            state.remove(path)
    return target


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
