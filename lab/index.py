"""The lab's package index: a PEP 503 simple index served over HTTP on the bridge.

It holds the SGLang simulator as wheels named ``sglang`` (built from lab/sglang_sim, rebuilt
when the tree changes), the simulator's dependencies, the deploy's installer (uv, at the
version the deploy pins, layout.UV_VERSION) and SGLang's router, the real ``sglang-router`` wheel
(abi3 manylinux, at the toolkit's pin, layout.ROUTER_REQUIREMENT) with its dependencies, downloaded
once from PyPI as binary wheels for the container's Python (asked from the rootfs, never assumed).
Containers install from it exactly as production installs from PyPI and SGLang's nightly index:

The simulator is served under four nightly-style versions, all from the same tree
(lab/layout.py names them): the pinned one (pyproject.toml), a good newer nightly, one whose
wheel is truncated after its metadata was published apart (PEP 658, as PyPI serves it), so
resolution succeeds and the install fails half-way, and one with a regression built in
(``sglang/sim/regression.py``: every configuration hangs loading weights, so it never gets
ready).

    pip install --index-url http://10.200.0.1:8100/simple/ sglang==<version>

Beside it, under debian/, the apt repository of the Debian packages the deploy installs (lab/apt_repo.py).
"""

import hashlib
import html
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from zipfile import ZipFile

from lab import apt_repo, layout, procs
from lab.shell import LabError, run

WHEEL_CACHE = layout.CACHE_DIR / "wheels"
PID_FILE = layout.RUN_DIR / "index.pid"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64")
_BUILD_LEFTOVERS = ("__pycache__", "*.pyc", "build", "dist", "*.egg-info")


def project_name(wheel: Path) -> str:
    """PEP 503 normalized project name of a wheel file.

    >>> project_name(Path("PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.whl"))
    'pyyaml'
    """
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def sim_metadata(sim_dir: Path) -> tuple[str, list[str]]:
    """(version, dependencies) from the simulator's pyproject.toml."""
    project = tomllib.loads((sim_dir / "pyproject.toml").read_text())["project"]
    return project["version"], project.get("dependencies", [])


def tree_digest(root: Path) -> str:
    """Hash of a source tree's paths and contents, ignoring build leftovers."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not any(
            fnmatch(part, pattern) for part in relative.parts for pattern in _BUILD_LEFTOVERS
        ):
            digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def container_python(rootfs: Path) -> str:
    """The rootfs python's X.Y, e.g. '3.11'."""
    version = "import sys; print('%d.%d' % sys.version_info[:2])"
    return run(["chroot", str(rootfs), "python3", "-c", version]).stdout.strip()


def _cached(key: str, fill: Callable[[Path], None]) -> list[Path]:
    """Wheels in cache dir ``key``; ``fill(tmp_dir)`` populates it first when missing.

    Filled in a temp dir and renamed, so a killed run never leaves a partial cache entry
    (and the temp dirs a killed run left are removed here).
    """
    final = WHEEL_CACHE / key
    if not final.is_dir():
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        # the cache is shared by every lab slot: only a dead process's temp dir is a leftover
        for leftover in WHEEL_CACHE.glob(".tmp-*"):
            if not Path(f"/proc/{leftover.name.split('-')[1]}").exists():
                shutil.rmtree(leftover, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=WHEEL_CACHE, prefix=f".tmp-{os.getpid()}-") as tmp:
            fill(Path(tmp) / "wheels")
            try:
                (Path(tmp) / "wheels").rename(final)
            except OSError:  # another slot finished the same entry first
                if not final.is_dir():
                    raise
    return sorted(final.glob("*.whl"))


# The never-ready nightly's built-in fault (sglang/sim/faults.py reads sglang.sim.regression).
_REGRESSION = 'FAULTS = {"hang": "weights"}\n'


def _set_version(source: Path, version: str) -> None:
    pyproject = source / "pyproject.toml"
    text, count = re.subn(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text(), count=1)
    if count != 1:
        raise LabError(f'{pyproject}: no `version = "..."` line to set')
    pyproject.write_text(text)


def _break_wheel(wheel: Path) -> None:
    """Publish the wheel's METADATA beside it (PEP 658), then cut the wheel in half: resolvers
    read the metadata and succeed, the install downloads the wheel and fails on it."""
    with ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        wheel.with_name(wheel.name + ".metadata").write_bytes(archive.read(name))
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])


def sim_wheel(sim_dir: Path) -> list[Path]:
    """The ``sglang`` wheels built from copies of the simulator tree (the build must not leave
    build/ or egg-info in the tracked source tree): the pinned version and the lab's nightlies."""
    pinned, _ = sim_metadata(sim_dir)
    versions = [pinned, layout.BROKEN_NIGHTLY, layout.NEVER_READY_NIGHTLY, layout.GOOD_NIGHTLY]

    def build(out: Path) -> None:
        for version in versions:
            with tempfile.TemporaryDirectory() as tmp:
                source = Path(tmp) / "src"
                shutil.copytree(sim_dir, source, ignore=shutil.ignore_patterns(*_BUILD_LEFTOVERS))
                _set_version(source, version)
                if version == layout.NEVER_READY_NIGHTLY:
                    (source / "sglang/sim/regression.py").write_text(_REGRESSION)
                pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet"]
                run([*pip_wheel, "--wheel-dir", str(out), str(source)])
        _break_wheel(next(out.glob(f"sglang-{layout.BROKEN_NIGHTLY}-*.whl")))

    recipe = hashlib.sha256(" ".join([*versions, _REGRESSION]).encode()).hexdigest()[:8]
    key = f"sglang-{tree_digest(sim_dir)}-{recipe}"
    # builds of other trees stay: other slots (worktrees) may serve them right now
    return _cached(key, build)


def installer_requirements() -> list[str]:
    """uv as the deploy pins it: its requirement file, hashes required (pip download checks them)."""
    return ["--require-hashes", "--no-deps", "-r", str(layout.UV_REQUIREMENT)]


def router_requirements() -> list[str]:
    """sglang-router as the toolkit pins it, with its dependencies (resolved by pip download)."""
    return ["-r", str(layout.ROUTER_REQUIREMENT)]


def dependency_wheels(requirements: list[str], python: str) -> list[Path]:
    """Binary wheels of ``requirements`` (and their dependencies) for CPython ``python``."""
    if not requirements:
        return []
    # a requirement file is keyed by its text (a new pin is a new entry), not by its path
    words = [Path(r).read_text() if r.endswith(".txt") else r for r in requirements]
    key = hashlib.sha256(f"{python} {sorted(words)}".encode()).hexdigest()[:16]

    def download(out: Path) -> None:
        platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        pip_download = [sys.executable, "-m", "pip", "download", "--quiet"]
        binaries = ["--only-binary=:all:", "--python-version", python, *platforms]
        run([*pip_download, *binaries, "--dest", str(out), *requirements])

    return _cached(f"deps-{key}", download)


def write_index(wheels: list[Path], rootfs: Path | None = None) -> None:
    """Lay out INDEX_DIR as a simple index: simple/<project>/index.html next to its wheels; with
    `rootfs`, the apt repository of its packages beside it (debian/, lab/apt_repo.py)."""
    staging = layout.INDEX_DIR.with_name("index.new")
    shutil.rmtree(staging, ignore_errors=True)
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        projects.setdefault(project_name(wheel), []).append(wheel)
    for project, files in projects.items():
        project_dir = staging / "simple" / project
        project_dir.mkdir(parents=True)
        links = []
        for wheel in files:
            shutil.copy2(wheel, project_dir / wheel.name)
            sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
            name = html.escape(wheel.name)
            metadata = wheel.with_name(wheel.name + ".metadata")
            attributes = ""
            if metadata.is_file():  # PEP 658 (data-dist-info-metadata) / PEP 714 (data-core-metadata)
                shutil.copy2(metadata, project_dir / metadata.name)
                digest = hashlib.sha256(metadata.read_bytes()).hexdigest()
                attributes = f' data-dist-info-metadata="sha256={digest}" data-core-metadata="sha256={digest}"'
            links.append(f'<a href="{name}#sha256={sha256}"{attributes}>{name}</a><br>')
        (project_dir / "index.html").write_text(_page(f"Links for {project}", links))
    (staging / "simple").mkdir(parents=True, exist_ok=True)
    (staging / "simple/index.html").write_text(
        _page("Simple index", [f'<a href="{p}/">{p}</a><br>' for p in sorted(projects)])
    )
    if rootfs is not None:
        apt_repo.write(staging / "debian", rootfs)
    shutil.rmtree(layout.INDEX_DIR, ignore_errors=True)
    staging.rename(layout.INDEX_DIR)


def _page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            f"<html><head><title>{title}</title></head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


def publish(sim_dir: Path, rootfs: Path) -> str:
    """Build or reuse the wheels and write the index; returns the sglang version published."""
    version, requirements = sim_metadata(sim_dir)
    python = container_python(rootfs)
    write_index(
        sim_wheel(sim_dir)
        + dependency_wheels(requirements, python)
        + dependency_wheels(installer_requirements(), python)
        + dependency_wheels(router_requirements(), python),
        rootfs,
    )
    return version


def server_pid() -> int | None:
    return procs.live_pid(PID_FILE, str(layout.INDEX_DIR))


def serve() -> int:
    """Serve INDEX_DIR on the bridge address (python's http.server); returns its pid."""
    pid = server_pid()
    if pid:
        return pid
    pid = procs.start_daemon(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            layout.BRIDGE_ADDRESS,
            "--directory",
            str(layout.INDEX_DIR),
            str(layout.INDEX_PORT),
        ],
        PID_FILE,
        layout.LOG_DIR / "index.log",
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((layout.BRIDGE_ADDRESS, layout.INDEX_PORT), timeout=1).close()
            return pid
        except OSError:
            # alive, not server_pid(): until the daemon has exec'd, its argv is still ours
            if not procs.alive(pid):
                break
            time.sleep(0.05)
    raise LabError(f"the index server did not start; see {layout.LOG_DIR / 'index.log'}")


def stop() -> int | None:
    return procs.stop(PID_FILE, str(layout.INDEX_DIR))
