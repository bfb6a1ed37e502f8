"""SGLang virtualenvs, one per exact version, built beside their final path from a hash lock."""

import json
import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, QuoteString, StringCommand, operation

from sglang_pve.config.indexes import IndexLogin
from sglang_pve.config.supply import normalized
from sglang_pve.deploy import paths, venv_progress
from sglang_pve.deploy.facts.venvs import SglangVenv, VenvParents
from sglang_pve.deploy.index import netrc_text
from sglang_pve.deploy.operations.files import ManagedFile, converge
from sglang_pve.deploy.progress import FollowedCommand

LOCK_IN_BUILD = "sglang-pve.lock"  # the lock's name inside the venv being built
_RESOLVE_DIR = "sglang-pve-resolve"  # inside the build: the pyproject.toml uv resolves (removed after)
_EXTRA_INDEX = "sglang-index"  # the extra index's name in that pyproject
UV_REQUIREMENT = f"{paths.UV_VENV}/uv-requirement.txt"  # uv==VERSION with its hashes, pip's input
_REPORT = "sglang-pve-report.json"
FAILURE_TAIL = 40  # lines of the installer's log shown when it fails (its DEBUG lines left out)
# pip's --report (pip >= 22.2) as a requirements file with hashes; a distribution the index gives
# no sha256 for cannot be locked, so the build stops there and names it.
_REPORT_TO_LOCK = """\
import json, sys
for item in sorted(json.load(open(sys.argv[1]))["install"], key=lambda i: i["metadata"]["name"].lower()):
    info, meta = item["download_info"].get("archive_info", {}), item["metadata"]
    sha256 = (info.get("hashes") or {}).get("sha256") or info.get("hash", "").partition("sha256=")[2]
    if not sha256:
        sys.exit(f"{meta['name']} {meta['version']}: the index gives no sha256, so it cannot be locked")
    print(f"{meta['name']}=={meta['version']} --hash=sha256:{sha256}")
"""


# The pip wheel ensurepip installs from (CPython Lib/ensurepip/__init__.py _get_packages: the
# distribution's wheel directory, sysconfig WHEEL_PKG_DIR, e.g. Debian's /usr/share/python-wheels, else
# its own _bundled wheels). pip runs from its wheel (pip's src/pip/__main__.py: "python pip-*.whl/pip
# install ..."), as ensurepip itself runs it.
PIP_WHEEL = """\
import glob, os, sys, sysconfig, ensurepip
dirs = [sysconfig.get_config_var("WHEEL_PKG_DIR"), os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")]
wheels = [sorted(glob.glob(os.path.join(d, "pip-*.whl"))) for d in dirs if d]
found = [w[-1] for w in wheels if w]
if not found:
    sys.exit("no pip wheel for ensurepip in %s: install python3-venv" % " or ".join(d for d in dirs if d))
print(found[0])
"""


@dataclass(frozen=True)
class Source:
    """Where and how distributions come from: the configured indexes and installer."""

    index_url: str
    extra_index_urls: tuple[str, ...] = ()
    installer: str = "uv"  # "uv" or "pip"
    uv_version: str = ""
    uv_sha256: tuple[str, ...] = ()  # of uv's wheels: installed with hashes required
    index_packages: tuple[str, ...] = ()  # resolved only from extra_index_urls[0] (uv)
    sdist_allowed: tuple[str, ...] = ()  # built from their sdist; everything else wheels only
    import_check: tuple[str, ...] = ("sglang", "torch", "sgl_kernel")
    hooks: tuple[ManagedFile, ...] = field(default=())  # files every venv gets (the NCCL startup hook)
    logins: tuple[IndexLogin, ...] = ()  # the indexes' logins (their passwords are Secrets: never shown)
    project: str = "sglang"  # the distribution the venv holds at `version` (the router's: "sglang-router")

    def index_args(self, uv: bool = False, resolve: bool = False) -> list:
        """Index options; the URLs hold no credentials (config/indexes.py refuses them): the logins
        reach the installer through NETRC=, never its argv (visible to every user in ps).

        uv resolves (`resolve`) from the default index alone, with first-index: the extra index is
        an explicit one in the pyproject it resolves (resolve_pyproject), read only for the packages
        pinned to it. Installing from the lock reads both indexes: every file's sha256 is pinned
        and nothing is resolved (--no-deps), so where a file comes from cannot change what is
        installed. pip merges all indexes it is given; the config model allows it one
        (config/supply.py)."""
        args: list = ["--index-url", QuoteString(self.index_url)]
        if not (uv and resolve):
            for url in self.extra_index_urls:
                args += ["--extra-index-url", QuoteString(url)]
        if uv:
            strategy = "first-index" if resolve or not self.extra_index_urls else "unsafe-best-match"
            args += ["--index-strategy", strategy, "--prerelease", "allow"]
        return args

    def binary_args(self) -> list:
        """Wheels only, so that no build backend runs (as root) while resolving or installing;
        the allowed sdists from source (a name in both lists would be pip's and uv's error)."""
        args: list = ["--only-binary", QuoteString(":all:")]
        for name in self.sdist_allowed:
            args += ["--no-binary", QuoteString(name)]
        return args

    def resolve_pyproject(self, version: str) -> str:
        """What uv resolves: sglang==version, each package of index_packages pinned to the extra
        index ([tool.uv.sources] apply to direct requirements only, so each is one). JSON strings
        are TOML basic strings; the URL has no credentials (NETRC=)."""
        requirements = [f"{self.project}=={version}"]
        lines = ["[project]", 'name = "sglang-pve-venv"', 'version = "0"']
        if self.extra_index_urls:
            requirements += [name for name in self.index_packages if normalized(name) != normalized(self.project)]
            lines += ["dependencies = " + json.dumps(requirements), "", "[tool.uv.sources]"]
            lines += [f"{json.dumps(name)} = {{ index = {json.dumps(_EXTRA_INDEX)} }}" for name in self.index_packages]
            url = self.extra_index_urls[0]
            lines += ["", "[[tool.uv.index]]", f"name = {json.dumps(_EXTRA_INDEX)}", f"url = {json.dumps(url)}"]
            lines += ["explicit = true"]
        else:
            lines += ["dependencies = " + json.dumps(requirements)]
        return "\n".join(lines) + "\n"

    @property
    def uv_requirement(self) -> str:
        return " ".join([f"uv=={self.uv_version}", *(f"--hash=sha256:{digest}" for digest in self.uv_sha256)])

    @property
    def netrc(self) -> ManagedFile | None:
        """The root-only netrc holding the indexes' logins; None when they need none."""
        text = netrc_text(self.logins)
        return ManagedFile(paths.INDEX_NETRC, text, mode="600", secret=True) if text else None

    @property
    def env(self) -> list:
        """What precedes every installer command: NETRC= when the indexes need credentials."""
        return [f"NETRC={paths.INDEX_NETRC}"] if self.netrc else []

    def lock_header(self, version: str) -> str:
        urls = [f"# index-url {self.index_url}"] + [f"# extra-index-url {u}" for u in self.extra_index_urls]
        if self.extra_index_urls and self.index_packages:
            urls.append(f"# from the extra index only: {', '.join(self.index_packages)}")
        return (
            "\n".join(
                [f"# sglang-pve lock of {self.project}=={version} (install with hashes required, --no-deps)", *urls]
            )
            + "\n"
        )


def _and(*commands: Sequence[object]) -> list[object]:
    """Command words (str, QuoteString, ...) joined by &&."""
    joined: list[object] = []
    for command in commands:
        if joined:
            joined.append("&&")
        joined.extend(command)
    return joined


def install_log(build: str, step: str) -> str:
    """The installer's log of `step` (resolve, install) beside the build; removed with the build (on
    failure its tail was shown) or once the venv is in place."""
    return f"{build}.{step}.log"


def _logs(build: str) -> list:
    return [QuoteString(install_log(build, step)) for step in ("resolve", "install")]


def _new_log(log: str) -> list:
    """An empty root-only log (its lines name the indexes; the umask in a subshell only)."""
    return ["(", "umask", "077", "&&", ":", ">", QuoteString(log), ")"]


def _logged(command: list, log: str, stdout: bool = False) -> list:
    """`command` writing its stderr (and with `stdout` its stdout) to `log`; when it fails its last
    lines but DEBUG ones go to stderr, as --quiet showed the error before, and the chain fails."""
    quoted = QuoteString(log)
    redirect = [">>", quoted, "2>&1"] if stdout else ["2>>", quoted]
    tail = ["grep", "-v", QuoteString("^DEBUG "), quoted, "|", "tail", "-n", str(FAILURE_TAIL), ">&2"]
    return ["{", *command, *redirect, "||", "{", *tail, ";", "false", ";", "}", ";", "}"]


def _resolve(source: Source, version: str, build: str) -> list:
    """Resolve project==version into a hash lock at build/LOCK_IN_BUILD (header with masked URLs)."""
    lock = QuoteString(f"{build}/{LOCK_IN_BUILD}")
    header = ["printf", "%s", QuoteString(source.lock_header(version)), ">", lock]
    requirement = QuoteString(f"{source.project}=={version}")
    if source.installer == "uv":
        resolve_dir = QuoteString(f"{build}/{_RESOLVE_DIR}")
        pyproject = QuoteString(f"{build}/{_RESOLVE_DIR}/pyproject.toml")
        write = ["mkdir", resolve_dir]
        write += ["&&", "printf", "%s", QuoteString(source.resolve_pyproject(version)), ">", pyproject]
        compile_ = [
            *source.env,
            QuoteString(f"{paths.UV_VENV}/bin/uv"),
            "pip",
            "compile",
            pyproject,
            "-v",  # its progress, to the log (venv_progress.py); the lock is stdout
            "--generate-hashes",
            "--no-header",
            "--no-annotate",
            "--python",
            QuoteString(f"{build}/bin/python"),
            *source.index_args(uv=True, resolve=True),
            *source.binary_args(),
            ">>",
            lock,
        ]
        return _and(header, write, _logged(compile_, install_log(build, "resolve")), ["rm", "-rf", resolve_dir])
    report = QuoteString(f"{build}/{_REPORT}")
    pip = [
        *source.env,
        QuoteString(f"{build}/bin/pip"),
        "install",
        "--progress-bar",
        "off",
        "--disable-pip-version-check",
        "--no-input",
        "--dry-run",
        "--report",
        report,
        *source.index_args(),
        *source.binary_args(),
        requirement,
    ]
    convert = [QuoteString(f"{build}/bin/python"), "-c", QuoteString(_REPORT_TO_LOCK), report, ">>", lock]
    return _and(_logged(pip, install_log(build, "resolve"), stdout=True), header, convert, ["rm", "-f", report])


def _install(source: Source, build: str) -> list:
    """Install exactly the lock: hashes required, no dependency resolution."""
    lock = QuoteString(f"{build}/{LOCK_IN_BUILD}")
    log = install_log(build, "install")
    if source.installer == "uv":
        command = [
            *source.env,
            QuoteString(f"{paths.UV_VENV}/bin/uv"),
            "pip",
            "install",
            "-v",
            "--require-hashes",
            "--no-deps",
            "--python",
            QuoteString(f"{build}/bin/python"),
            *source.index_args(uv=True),
            *source.binary_args(),
            "-r",
            lock,
        ]
        return [*_new_log(log), "&&", *_logged(command, log)]
    command = [
        *source.env,
        QuoteString(f"{build}/bin/pip"),
        "install",
        "--progress-bar",
        "off",
        "--disable-pip-version-check",
        "--no-input",
        "--no-compile",
        "--require-hashes",
        "--no-deps",
        *source.index_args(),
        *source.binary_args(),
        "-r",
        lock,
    ]
    return [*_new_log(log), "&&", *_logged(command, log, stdout=True)]


def _cleaned_on_failure(build: str, command: list, watch=None) -> StringCommand:
    """`{ command; } || { rm -rf build LOGS; exit 1; }`: a failed step leaves nothing half-built. With
    `watch` (venv_progress.watch) its progress is logged while it runs."""
    bits = [
        "{",
        *command,
        ";",
        "}",
        "||",
        "{",
        "rm",
        "-rf",
        QuoteString(build),
        *_logs(build),
        ";",
        "exit",
        "1",
        ";",
        "}",
    ]
    return FollowedCommand(*bits, watch=watch) if watch else StringCommand(*bits)


@operation()
def venv(path: str, version: str, source: Source, run: str, lock: str | None = None):
    """
    Make `path` a virtualenv holding exactly sglang==version (source.project: another
    distribution, e.g. the router's sglang-router) and its locked dependencies.

    + path: the venv, one per exact version (paths.venv_path)
    + version: an exact version, e.g. the nightly "0.5.16.dev20260720+g8905cbd42"
    + source: indexes, installer (uv or pip), modules to import-check, files every venv gets
    + run: this run's token (provenance.run_token): names the build directory
    + lock: reinstall from this lock (a release's record) instead of resolving

    The venv is built at paths.partial_venv_path(path, run), under the container's deploy lock
    (builds that earlier, killed runs left behind are removed first): resolved into a lock with every
    distribution's sha256 (uv pip compile --generate-hashes, or pip's --report), installed from
    it with hashes required, import-checked, given the startup hook, and only then moved into
    place with its lock beside it (paths.lock_path, root-only). A failure anywhere removes the
    build and leaves `path` as it was. While the resolve and the install run, the installer's
    log (root-only, beside the build) is summed up in a progress line every progress.INTERVAL_S
    (venv_progress.py); when it fails, its last lines (DEBUG ones left out) go to stderr. uv itself
    is installed on first use
    from the default index, with hashes required (uv_sha256).

    **Example:**

    .. code:: python

        venv(path="/opt/sglang/venvs/sglang-0.5.16.dev20260720+g8905cbd42",
             version="0.5.16.dev20260720+g8905cbd42", run=run_token(),
             source=Source(index_url="https://pypi.org/simple",
                           extra_index_urls=("https://docs.sglang.ai/whl/cu130/",)))
    """
    lock_file = paths.lock_path(path)
    current = host.get_fact(SglangVenv, venv=path, lock=lock_file, uv=paths.UV_VENV, distribution=source.project)
    if current.version == version and current.lock_sha256:
        host.noop(f"{source.project} {version} is installed in {path}, locked")
        return
    # root builds and later runs what lies here: nobody but root may be able to change it
    unsafe = [why for owner in host.get_fact(VenvParents, path=posixpath.dirname(path)) if (why := owner.problem())]
    if unsafe:
        raise OperationError(
            f"{host.name}: sglang_venvs_dir: {'; '.join(unsafe)}, so its owner could replace the code root "
            "installs and runs. Fix: make it and every parent root-owned and writable by root only "
            f"(chown root:root DIR; chmod go-w DIR), or set sglang_venvs_dir to such a directory"
        )
    if source.netrc:  # rewritten before every build: credentials changed in the data reach the host
        yield from converge([source.netrc], {})
    if source.installer == "uv" and current.uv != source.uv_version:
        if not source.uv_sha256:
            raise OperationError(f"uv {source.uv_version}: no sha256 to install it with (uv_sha256)")
        # from the default index only, the hashes required (one per platform's wheel), no build; by
        # pip run from ensurepip's own wheel, so that uv's venv gets no pip and setuptools of its own
        # (ensurepip's install of them: 4.7 s of a container's CPU in the lab, for a venv that holds uv)
        yield StringCommand(
            *_and(
                ["python3", "-m", "venv", "--without-pip", QuoteString(paths.UV_VENV)],
                ["printf", QuoteString("%s\\n"), QuoteString(source.uv_requirement), ">", QuoteString(UV_REQUIREMENT)],
                ["w=$(python3", "-c", QuoteString(PIP_WHEEL), ")"],
                [
                    *source.env,
                    QuoteString(f"{paths.UV_VENV}/bin/python"),
                    '"$w/pip"',
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--require-hashes",
                    "--no-deps",
                    "--only-binary",
                    QuoteString(":all:"),
                    "--index-url",
                    QuoteString(source.index_url),
                    "-r",
                    QuoteString(UV_REQUIREMENT),
                ],
            )
        )

    outside = [hook.path for hook in source.hooks if not hook.path.startswith(path + "/")]
    if outside:
        raise OperationError(f"venv hooks must lie inside {path}: {', '.join(outside)}")
    build = paths.partial_venv_path(path, run)
    # every build of this venv a killed run left (the lock is held: no live run builds one now)
    steps: list[list] = [
        ["rm", "-rf", "--", shlex.quote(paths.partial_venv_path(path)) + "-*"],
        # uv installs into the build from outside (--python): no pip and setuptools of ensurepip's in it
        ["python3", "-m", "venv", *(["--without-pip"] if source.installer == "uv" else []), QuoteString(build)],
    ]
    label = f"{source.project} {version}"
    if lock is None:
        steps += [_new_log(install_log(build, "resolve")), _resolve(source, version, build)]
        yield _cleaned_on_failure(
            build, _and(*steps), venv_progress.watch(install_log(build, "resolve"), label, "resolving")
        )
    else:
        yield _cleaned_on_failure(build, _and(*steps))
    if lock is not None:
        yield FileUploadCommand(BytesIO(lock.encode()), f"{build}/{LOCK_IN_BUILD}")

    # the hook first: the import check runs with it, and it is compiled with the rest
    for hook in source.hooks:
        target = build + hook.path[len(path) :]
        yield StringCommand("mkdir", "-p", QuoteString(posixpath.dirname(target)))
        yield FileUploadCommand(BytesIO(hook.data), target)
    python = QuoteString(f"{build}/bin/python")
    check = "import " + ", ".join(source.import_check)
    # Scripts and activate files name the build path; they must name the final one.
    relocate = [
        "grep",
        "-rlIZF",
        QuoteString(build),
        QuoteString(f"{build}/bin"),
        "|",
        "xargs",
        "-0",
        "-r",
        "sed",
        "-i",
        QuoteString(f"s#{build}#{path}#g"),
    ]
    # Bytecode now, naming the final path (tracebacks), so that no later import (a preflight
    # under --dry) writes into the venv; a file that does not compile is no reason to fail (pip's rule).
    compile_ = [
        "{",
        python,
        "-m",
        "compileall",
        "-q",
        "-s",
        QuoteString(build),
        "-p",
        QuoteString(path),
        QuoteString(f"{build}/lib"),
        ">/dev/null",
        "||",
        "true",
        ";",
        "}",
    ]
    yield _cleaned_on_failure(
        build,
        _and(_install(source, build), [python, "-c", QuoteString(check)], relocate, compile_),
        venv_progress.watch(install_log(build, "install"), label, "installing"),
    )
    built_lock = QuoteString(f"{build}/{LOCK_IN_BUILD}")
    old = QuoteString(f"{build}.old")
    yield _cleaned_on_failure(
        build,
        _and(
            ["chmod", "600", built_lock],
            ["mv", "-f", built_lock, QuoteString(lock_file)],
            # a venv already at `path` (another build of this version, or an unlocked one) is replaced
            ["rm", "-rf", old],
            ["if", "[", "-e", QuoteString(path), "];", "then", "mv", QuoteString(path), old, ";", "fi"],
            ["mv", "-T", QuoteString(build), QuoteString(path)],
            ["rm", "-rf", old, *_logs(build)],
        ),
    )
