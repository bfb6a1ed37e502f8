"""The shipped zipapp: deterministic bytes, stdlib only, runs with the system python3."""

import ast
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

from sglang_pve.agent import zipapp

PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def test_same_sources_give_the_same_bytes():
    first = zipapp.build()
    assert first == zipapp.build()
    with zipfile.ZipFile(BytesIO(first)) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names[0] == "__main__.py" and names[1:] == sorted(names[1:])
    assert "sglang_pve/__init__.py" in names and "sglang_pve/agent/cli.py" in names
    assert not any("__pycache__" in name or not name.endswith(".py") for name in names)
    assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {info.external_attr >> 16 for info in infos} == {0o100644}


# The all-reduce probe runs with the python of SGLang's venv and imports its torch inside the
# function that runs a rank; nothing else that ships may import beyond the standard library.
LAZY_IMPORTS = {"sglang_pve/agent/allreduce_probe.py": {"torch"}}


def test_the_agent_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names)
    for name, path in zipapp.sources():
        allowed = stdlib | {"sglang_pve"} | LAZY_IMPORTS.get(name, set())
        tree = ast.parse(Path(path).read_text(), path)
        for node in ast.walk(tree):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for module in modules:
                top = module.split(".")[0]
                assert top in allowed, f"{name} imports {module}"


def test_built_zipapp_runs_help_and_holders_with_the_system_python(tmp_path):
    target = tmp_path / "sglang-pve-agent.pyz"
    target.write_bytes(zipapp.build())
    done = subprocess.run([PYTHON, str(target), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "prestart" in done.stdout and "SGLANG_PVE_NVIDIA_SMI" in done.stdout and "| 5    | gate" in done.stdout
    done = subprocess.run(
        [PYTHON, str(target), "gate", "--spec", str(tmp_path / "none.json"), "--main-pid", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "file not found" in done.stderr


# A deploy's own agent commands (the lock, the releases read, the lock given back) run on every host
# in every run: each imports only what it uses (zipimport compiles every module it loads, at each start).
_MODULES = "import sys; print(' '.join(sorted(m for m in sys.modules if m.startswith('sglang_pve.agent.'))))"


def test_a_deploys_own_commands_import_only_what_they_use(tmp_path):
    target = tmp_path / "sglang-pve-agent.pyz"
    target.write_bytes(zipapp.build())
    releases = str(tmp_path / "releases")
    unused = {"gate", "watchdog", "reaper", "switch", "status", "crashes", "router_worker", "bench_client"}
    for command in (
        # its holder watches PID 1 and ends when unlock gives the lock back (or after 60 s at most)
        ["lock", "--dir", releases, "--token", "aaa", "--owner", "test", "--json", "--watch-pid", "1", "--max-hold=60"],
        ["releases", "--dir", releases],
        ["unlock", "--dir", releases, "--token", "aaa"],
    ):
        code = (
            f"import sys; sys.path.insert(0, {str(target)!r}); from sglang_pve.agent import cli; "
            f"code = cli.main({command!r}); {_MODULES}; sys.exit(code)"
        )
        done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        loaded = {name.removeprefix("sglang_pve.agent.") for name in done.stdout.split("\n")[-2].split()}
        assert "cli" in loaded and not loaded & unused, (command[0], sorted(loaded & unused))


def test_a_long_running_command_says_why_it_failed_after_the_deploy_replaced_its_zipapp(tmp_path):
    """zipimport reads a module imported late at the offsets of the zip the process started from, in
    whatever file lies at the path then (CPython 3.11/3.12: "bad local file header"): a unit's watchdog
    outlives the deploy that replaces the agent. Failing, it imports nothing more to say why."""
    target = tmp_path / "sglang-pve-agent.pyz"
    target.write_bytes(zipapp.build())
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from sglang_pve.agent import cli, spec, exitcodes\n"
        "os.replace(sys.argv[2], sys.argv[1])  # the deploy's atomic write of another agent\n"
        "for error, expected in ((spec.SpecError('bad spec'), exitcodes.USAGE), (KeyError('x'), exitcodes.INTERNAL)):\n"
        "    try:\n"
        "        raise error\n"
        "    except Exception as raised:\n"
        "        assert cli._failed('watchdog', raised) == expected\n"
        "print('said why')"
    )
    other = tmp_path / "new.pyz"
    with zipfile.ZipFile(other, "w") as archive:  # another agent: other files, other offsets
        archive.writestr("__main__.py", "# " + "x" * 5000)
    done = subprocess.run([PYTHON, "-c", code, str(target), str(other)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "said why" in done.stdout, done.stderr
    assert "watchdog: bad spec" in done.stderr and "KeyError" in done.stderr


def _loaded_from(target: Path, *command: str) -> str:
    """Where the zipapp's cli module came from when `python3 TARGET COMMAND` ran (python -v's line)."""
    done = subprocess.run([PYTHON, "-v", str(target), *command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stderr.splitlines() if line.startswith("import 'sglang_pve.agent.cli'"))
    return line.split('"')[1]


def test_the_compiled_copy_is_what_later_starts_run_and_compile_nothing(tmp_path):
    """agent compile writes the copy of this build for this interpreter, every module also as an
    unchecked hash-based .pyc (PEP 552); `__main__.py` runs from it, and from itself without it.
    Copies of other builds or interpreters go; one of another interpreter is never taken."""
    target = tmp_path / "sglang-pve-agent.pyz"
    target.write_bytes(zipapp.build())
    holder = ["holder", "--dir", str(tmp_path / "releases")]
    stale = [tmp_path / ".sglang-pve-agent.pyz.0123456789abcdef.cpython-311.zip", tmp_path / ".other.zip"]
    for path in stale:
        path.write_bytes(b"")
    foreign = tmp_path / f".sglang-pve-agent.pyz.{_build(target)}.other-tag.zip"  # another interpreter's
    foreign.write_bytes(b"not a zip")
    assert _loaded_from(target, *holder).startswith(f"{target}/")  # no copy of its own: the zipapp itself
    tag = subprocess.run([PYTHON, "-c", "import sys; print(sys.implementation.cache_tag)"], capture_output=True)
    done = subprocess.run([PYTHON, str(target), "compile", "--zipapp", str(target)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / f".sglang-pve-agent.pyz.{_build(target)}.{tag.stdout.decode().strip()}.zip"
    assert done.stdout.strip().endswith(str(copy)) and copy.stat().st_mode & 0o777 == 0o644
    assert not stale[0].exists() and not foreign.exists() and stale[1].exists()  # only this zipapp's copies
    with zipfile.ZipFile(copy) as archive:
        names = set(archive.namelist())
        pyc = archive.read("sglang_pve/agent/cli.py" + "c")  # an archive member, not a path of the repository
    assert {name[:-1] for name in names if name.endswith(".pyc")} == {
        name for name in names if name.endswith(".py") and name != "__main__.py"
    }
    assert int.from_bytes(pyc[4:8], "little") == 0b01  # hash-based, its source never checked
    assert _loaded_from(target, *holder).startswith(f"{copy}/")
    assert _loaded_from(copy, *holder).startswith(f"{copy}/")  # the copy run itself (watchdog.self_command)


def _build(target: Path) -> str:
    with zipfile.ZipFile(target) as archive:
        return zipapp.build_id([(name, archive.read(name)) for name in archive.namelist()])
