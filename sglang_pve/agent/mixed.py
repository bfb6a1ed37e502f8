"""No start from a mix of two releases: prestart refuses when the files a unit reads are neither
the current release's nor those of the release a switch is under way to (release_store.py).

A deploy writes a release's files in place before its switch (the running server is untouched
until then). A reboot in that window starts the enabled unit of the old release, and a watchdog
restart restarts it, with some files new and some old: the host would run neither release while
`current` names the old one. This check closes that window: such a start fails, naming the files,
and the host runs nothing until the deploy runs again (or tasks/rollback.py). The switch starts a
unit only after the release's files are all in place and the release is `pending`, so its starts
pass; so do the transient starts of the benchmark (the current release's files). A unit no release
knows (before the first deploy, the GPU tests) is not checked.

    why_not(spec)  # None, or "the files sglang-baseline.service reads are neither ..."
"""

from sglang_pve.agent import contract, overrides
from sglang_pve.agent.release_store import ReleaseError, Store
from sglang_pve.agent.spec import Spec
from sglang_pve.agent.state import Record


def _read(record: Record, spec: Spec) -> list[str]:
    """The recorded files `spec`'s unit reads: all but the other configurations' own."""
    others = {
        path
        for unit in record["units"]
        if unit != spec.unit
        for path in contract.server_paths(unit.removeprefix(contract.UNIT_PREFIX).removesuffix(".service"))
    }
    return sorted(path for path in record["files"] if path not in others)


def why_not(spec: Spec) -> str | None:
    store = Store(overrides.releases_dir())
    try:
        pending = store.pending()
        candidates = [r for r in (store.get(pending) if pending else None, store.current()) if r]
    except ReleaseError:
        return None  # a store this agent cannot read names no release to hold the files to
    candidates = [r for r in candidates if spec.unit in r["units"]]
    if not candidates:
        return None
    differing = {}
    for record in candidates:
        found = store.differing(record, _read(record, spec))
        if not found:
            return None
        differing[record["id"]] = found
    named = "; ".join(f"release {rid}: {', '.join(paths)} differ" for rid, paths in differing.items())
    return (
        f"refusing to start {spec.unit}: the files it reads are neither the current release's nor a pending "
        f"switch's ({named}): a deploy was writing them when this start came (a reboot, a restart). "
        "Fix: run the deploy again, or tasks/rollback.py"
    )
