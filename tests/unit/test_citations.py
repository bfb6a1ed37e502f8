"""Comments and docs cite what is there: every repository path (`sglang_pve/...`, `tests/...`,
`lab/...`, `tasks/...`, `templates/...`, `bench/...`) and every `sglang_pve.` module named in a
.py, .md, .j2 or .toml file exists in this checkout, and nothing cites the shared folder beside
the checkout (`../shared`: users do not have it; cite the upstream repository and file, or a URL).

A path resolves from the repository root, from the citing file's folder or one above it, or from a
room of sglang_pve (`deploy/templates/`, `templates/` in a sentence about sglang_pve/deploy/).
Upstream files are cited by repository (pyinfra's `src/pyinfra/...`, SGLang's `python/sglang/...`):
those start with no name of ours and are not read here.
"""

import glob
import importlib.util
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

from tests.unit.source_names import top_level_names

ROOT = Path(__file__).resolve().parents[2]
ROOMS = sorted(p.name for p in (ROOT / "sglang_pve").iterdir() if (p / "__init__.py").exists())
FIRST = ["sglang_pve", "tests", "lab", "tasks", "bench", "inventory", "group_data", "templates", "deploys", *ROOMS]
_PATH_CHARS = r"[\w./*<>{}-]"
# a name of ours at the start of a path, not inside another path or URL (/etc/pve/tasks/..., https://...)
PATH_REF = re.compile(
    rf"(?<![\w./@:~$<>{{}}-])((?:\.\./)*shared\/{_PATH_CHARS}*|(?:{'|'.join(sorted(set(FIRST)))})/{_PATH_CHARS}*)"
)
MODULE_REF = re.compile(r"(?<![\w.])sglang_pve(?:\.[A-Za-z_]\w*)+")

# Named but not in the tree, each for a reason; an entry that exists or is no longer cited fails.
NOT_IN_TREE = {
    "inventory/mysite.py": "the user's own copy of inventory/prod.py (README, Production workflow)",
    "group_data/nccl_measured.yml": "written by tasks/nccl_probe.py --data write=1, read by the inventories",
    "group_data/bench_promoted.yml": "written by tasks/bench.py --data promote=1, read by the inventories",
    "tests/scope_seconds.json": (
        "written by tests/scope_seconds.py from a CI run's JUnit XML; absent until one is recorded"
    ),
}
# The lab's PVE API schema directory: an input the lab reads (lab/pve/schema.py), overridden by
# $SGLANG_PVE_PVE_SCHEMA_DIR; named as where it is looked for, not cited.
SHARED_INPUTS = ("shared/reference",)


def sources() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [ROOT / name for name in listed if name.endswith((".py", ".md", ".j2", ".toml")) and (ROOT / name).exists()]


def prose(path: Path) -> str:
    """What a file says: all of a .md, .j2 or .toml; the comments and strings of a .py."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    said = (tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING))  # 3.12+
    return "\n".join(t.string for t in tokens if t.type in said)


def path_refs(text: str) -> set[str]:
    return {m.group(1).rstrip(".,:;") for m in PATH_REF.finditer(text)}


def module_refs(text: str) -> set[str]:
    return set(MODULE_REF.findall(text))


def path_exists(ref: str, cited_in: Path) -> bool:
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", ref)  # tests/facts/<module>.<Fact>/<case>.json
    bases = [
        ROOT,
        cited_in.parent,
        cited_in.parent.parent,
        ROOT / "sglang_pve",
        *(ROOT / "sglang_pve" / r for r in ROOMS),
    ]
    for base in bases:
        if base.is_relative_to(ROOT) and any(
            Path(hit).resolve().is_relative_to(ROOT) for hit in glob.glob(str(base / pattern), recursive=True)
        ):
            return True
    return False


def module_exists(ref: str) -> bool:
    """sglang_pve.deploy.render.server_files: the longest importable module, then one name in it."""
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:cut]))
        except ModuleNotFoundError:  # a name inside a module, not a submodule
            spec = None
        if spec is not None:
            break
    rest = parts[cut:]
    return not rest or (spec.origin is not None and rest[0] in top_level_names(spec.origin))


def broken() -> list[str]:
    found = []
    for path in sources():
        text, where = prose(path), path.relative_to(ROOT)
        for ref in sorted(path_refs(text)):
            shared = ref.lstrip("./").split("/")[0] == "shared"
            if shared and not ref.lstrip("./").startswith(SHARED_INPUTS):
                found.append(f"{where}: {ref} is outside the repository: cite the upstream source or a URL")
            elif not shared and ref not in NOT_IN_TREE and not path_exists(ref, path):
                found.append(f"{where}: {ref} does not exist")
        found += [
            f"{where}: {ref} does not exist"
            for ref in sorted(module_refs(text))
            if ref not in NOT_IN_TREE and not module_exists(ref)
        ]
    return found


def test_every_cited_path_and_module_exists():
    assert not broken(), "\n".join(broken())


def test_the_exceptions_are_still_needed():
    cited = set()
    for path in sources():
        text = prose(path)
        cited |= path_refs(text) | module_refs(text)
    for ref, why in NOT_IN_TREE.items():
        assert ref in cited, f"{ref} ({why}) is no longer cited: delete it from NOT_IN_TREE"
        there = module_exists(ref) if "/" not in ref else path_exists(ref, ROOT / "README.md")
        assert not there, f"{ref} exists now: delete it from NOT_IN_TREE"


@pytest.mark.parametrize(
    "text, refs",
    [
        ("see `sglang_pve/agent/gate.py` and tests/unit/*.py.", {"sglang_pve/agent/gate.py", "tests/unit/*.py"}),
        ("https://github.com/x/tasks/a.py /etc/pve/lxc/1.conf $STATE/lab/dev", set()),
        ("(../shared" + "/notes/sglang.md section 4)", {"../shared" + "/notes/sglang.md"}),
    ],
)
def test_what_counts_as_a_path(text, refs):
    assert path_refs(text) == refs


def test_a_stale_reference_is_found(tmp_path):
    here = ROOT / "README.md"
    assert path_exists("sglang_pve/agent/gate.py", here) and path_exists("templates/", here)
    assert path_exists("tests/facts/<module>.<Fact>/<case>.json", here)
    assert not path_exists("sglang_pve/" + "preflight/probe.py", here)  # moved to agent/preflight_probe.py
    assert not path_exists("templates/" + "no-such.j2", here)
    assert module_exists("sglang_pve.deploy.render.server_files") and module_exists("sglang_pve.agent")
    assert not module_exists("sglang_pve." + "passthrough") and not module_exists("sglang_pve.deploy.render." + "nope")
    code = tmp_path / "code.py"
    code.write_text('lab.nodes(1).lxc.post(path="tests/unit")  # see lab/pve\n')
    assert prose(code) == '"tests/unit"\n# see lab/pve'  # a .py: its strings and comments, not its code
