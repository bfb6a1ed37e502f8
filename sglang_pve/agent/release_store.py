"""Releases on the host: what ran, recorded so that it can run again byte for byte.

The deploy records a release whenever what runs changes (the SGLang version, the active
configuration, any rendered file, the NCCL profile). Everything lives in one root-only directory
(the deploy passes paths.RELEASES_DIR):

    <id>.json        one record per release, 0600
    blobs/<sha256>   the content of every recorded file and lock, 0600, shared between releases
    current          the id of the release that runs (written once its readiness gate passed)
    pending          the id of the release a switch is under way to (written before it stops
                     anything, removed once it ended in a ready or a reverted release): present
                     after a switch was killed, when what runs is unknown and must switch again

A record (ids sort by time; the suffix is the release's fingerprint):

    {"id": "20261130T114354Z-3f2a9c1d", "time": "2026-11-30T11:43:54Z", "user": "alice@laptop",
     "commit": "ba504ac", "sglang_version": "0.5.16.dev20260720+g8905cbd42",
     "venv": "/opt/sglang/venvs/sglang-0.5.16.dev20260720+g8905cbd42",
     "lock": {"path": ".../sglang-0.5.16.dev20260720+g8905cbd42.lock", "sha256": "9f2c..."},
     "active_server": "baseline", "lifecycle": "/etc/sglang/servers/baseline.lifecycle.json",
     "units": ["sglang-baseline.service", ...], "nccl_profile": "pcie-tuned",
     "files": {"/etc/nccl.conf": {"sha256": "...", "mode": "644", "user": "root", "group": "root"},
               "/etc/sglang/secrets/baseline.yaml": {"sha256": "...", "mode": "600", ..., "secret": true}, ...},
     "blocks": {"/root/.zshrc": {"marker": "nccl-profile", "body": "export NCCL_PROTO=LL\\n..."}},
     "fingerprint": "3f2a9c1d...", "status": "recorded" | "ready" | "failed", "failure": null}

A secret file (`"secret": true`: the spec's "secrets", and anything under contract.SECRETS_DIR in
records older than the mark) never leaves the host: summary() gives its sha1, never its content,
and a rollback restores it here from its blob.

`status`: ready once its server passed the readiness gate; failed (with `failure`, the reason and
the diagnosis) when the switch to it was reverted.

    previous         the id of the release a rollback goes to by default, written by the switch:
                     the release that ran before a deploy's switch, the target of a rollback's
                     (rolling back twice stays there); prune never removes it
"""

import base64
import calendar
import contextlib
import grp
import hashlib
import json
import os
import pwd
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Self

from sglang_pve.agent import contract, lease, state
from sglang_pve.agent import spec as spec_module
from sglang_pve.agent.output import Say
from sglang_pve.agent.state import Record

_STAMP = "%Y%m%dT%H%M%SZ"


class ReleaseError(RuntimeError):
    """A release cannot be recorded, found or restored; the message says which and why."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_secret(path: str, entry: Mapping[str, object]) -> bool:
    """A recorded file whose content stays on the host (marked, or in the secrets directory)."""
    return bool(entry.get("secret")) or path.startswith(contract.SECRETS_DIR + "/")


def fingerprint(spec: Record, files: Mapping[str, Mapping[str, object]]) -> str:
    """What makes two releases the same: version, configuration, profile and file contents."""
    keys = {k: spec.get(k) for k in ("sglang_version", "active_server", "nccl_profile", "blocks")}
    keys["files"] = {path: entry["sha256"] for path, entry in sorted(files.items())}
    return _sha256(json.dumps(keys, sort_keys=True).encode())


def ready(record: Record, active: list[str]) -> bool:
    """`record`'s server passed its gate and is the one of its units that is `active` (those of
    its units whose ActiveState is active); a release without a server: none is. (Here, not in
    switch.py: the releases command reads it and imports no switch.)"""
    if not record["active_server"]:
        return not active
    try:
        lifecycle = spec_module.load(record["lifecycle"])
    except spec_module.SpecError:
        return False
    return active == [lifecycle.unit] and state.read_status(lifecycle).get("verdict") == "ready"


class Store:
    def __init__(self, directory: str):
        self.dir = directory

    def _path(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)

    @contextlib.contextmanager
    def locked(self, token: str | None = None, say: Say | None = None) -> Iterator[Self]:
        """One record-and-switch at a time on this host: a deploy killed on the controller can
        leave its switch running here, and a rerun must wait for it, not race it. `token`: the
        run that holds the deploy lock (lease.py) already; without it, wait for the lock."""
        with lease.locked(self.dir, token, say or _silent):
            yield self

    def ids(self) -> list[str]:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json") and not n.startswith("."))

    def get(self, release_id: str) -> Record:
        record = state.read_json(self._path(f"{os.path.basename(release_id)}.json"))
        if record is None:
            known = ", ".join(self.ids()[-5:]) or "none"
            raise ReleaseError(f"no release {release_id!r} in {self.dir} (latest: {known})")
        return record

    def records(self) -> list[Record]:
        return [r for r in (state.read_json(self._path(f"{i}.json")) for i in self.ids()) if r]

    def _read_id(self, name: str) -> str | None:
        try:
            with open(self._path(name), encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError:
            return None

    def current_id(self) -> str | None:
        return self._read_id("current")

    def current(self) -> Record | None:
        current = self.current_id()
        return self.get(current) if current else None

    def pending(self) -> str | None:
        return self._read_id("pending")

    def set_pending(self, release_id: str | None) -> None:
        if release_id is None:
            state.remove(self._path("pending"))
        else:
            state.write_atomic(self._path("pending"), release_id + "\n", mode=0o600)

    def save(self, record: Record) -> None:
        state.write_json(self._path(f"{record['id']}.json"), record, mode=0o600)

    def set_current(self, release_id: str) -> None:
        state.write_atomic(self._path("current"), release_id + "\n", mode=0o600)

    def blob(self, sha256: str) -> bytes:
        with open(self._path("blobs", sha256), "rb") as handle:
            return handle.read()

    def _keep_blob(self, data: bytes) -> str:
        digest = _sha256(data)
        path = self._path("blobs", digest)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            _write_bytes(path, data, 0o600)
        return digest

    def _new_stamp(self, now: float) -> str:
        """UTC time of the id, later than every existing id's (ids sort in recording order even
        when two come within a second or the clock stepped back)."""
        ids = self.ids()
        stamp = int(now)
        if ids:
            stamp = max(stamp, calendar.timegm(time.strptime(ids[-1][:16], _STAMP)) + 1)
        return time.strftime(_STAMP, time.gmtime(stamp))

    def record(self, spec: Record) -> Record:
        """Record the release `spec` describes: the files it rendered, each checked on disk.

        spec: {"sglang_version", "venv", "lock", "active_server", "lifecycle" (its spec file),
               "units", "nccl_profile", "files": {path: sha256 as rendered}, "secrets": [paths of
               files that hold secrets], "blocks", "user", "commit"}

        A file whose content on disk is not what the run rendered (another run or a person wrote
        it since) is refused, naming it: a release never labels files it does not hold.
        """
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        os.chmod(self.dir, 0o700)
        found = self.on_disk(spec["files"])
        differs = []
        for path, rendered in sorted(spec["files"].items()):
            entry = found[path]
            if entry is None or entry[0] != rendered:
                differs.append(f"{path} (rendered {rendered[:12]}, on disk {entry[0][:12] if entry else 'missing'})")
        if differs:
            raise ReleaseError(
                f"the files on disk are not the ones this run rendered: {'; '.join(differs)}. Another run or a "
                "person changed them meanwhile; fix: run the deploy again"
            )
        files: dict[str, dict[str, str | bool]] = {}
        secrets = set(spec.get("secrets") or ())
        for path in sorted(spec["files"]):
            entry = found[path]
            assert entry is not None  # checked above
            _, data, info = entry
            files[path] = {
                "sha256": self._keep_blob(data),
                "mode": f"{info.st_mode & 0o7777:o}",
                "user": _user(info.st_uid),
                "group": _group(info.st_gid),
            }
            if path in secrets or is_secret(path, {}):
                files[path]["secret"] = True
        try:
            with open(spec["lock"], "rb") as handle:
                lock = {"path": spec["lock"], "sha256": self._keep_blob(handle.read())}
        except OSError as error:
            raise ReleaseError(f"cannot record the lock {spec['lock']}: {error.strerror}") from None
        digest = fingerprint(spec, files)
        now = time.time()
        record: Record = {
            "id": self._new_stamp(now) + "-" + digest[:8],
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "user": spec.get("user"),
            "commit": spec.get("commit"),
            "sglang_version": spec["sglang_version"],
            "venv": spec["venv"],
            "lock": lock,
            "active_server": spec["active_server"],
            "lifecycle": spec.get("lifecycle"),
            "units": sorted(spec["units"]),
            "nccl_profile": spec["nccl_profile"],
            "files": files,
            "blocks": spec.get("blocks") or {},
            "fingerprint": digest,
            "status": "recorded",
            "failure": None,
        }
        self.save(record)
        return record

    @staticmethod
    def on_disk(paths: Iterable[str]) -> dict[str, tuple[str, bytes, os.stat_result] | None]:
        """Each path's (sha256, content, stat) as it is now; None where it cannot be read."""
        found: dict[str, tuple[str, bytes, os.stat_result] | None] = {}
        for path in paths:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
                    info = os.fstat(handle.fileno())
            except OSError:
                found[path] = None
                continue
            found[path] = (_sha256(data), data, info)
        return found

    def differing(self, record: Record, paths: Iterable[str] | None = None) -> list[str]:
        """The recorded files (of `paths`, default all) whose content on disk is not the record's."""
        entries = record["files"]
        wanted = [p for p in (entries if paths is None else paths) if p in entries]
        found = self.on_disk(wanted)
        return [p for p in wanted if (entry := found[p]) is None or entry[0] != entries[p]["sha256"]]

    def restore(self, record: Record) -> list[str]:
        """Put every recorded file back byte for byte (temp file + rename, recorded owner and
        mode); returns the paths that changed. Never follows a link at a recorded path."""
        changed = []
        for path, entry in sorted(record["files"].items()):
            if os.path.islink(path):
                raise ReleaseError(f"{path} is a symbolic link now; not restoring through it")
            try:
                with open(path, "rb") as handle:
                    same = _sha256(handle.read()) == entry["sha256"]
            except OSError:
                same = False
            if same and f"{os.stat(path).st_mode & 0o7777:o}" == entry["mode"]:
                continue
            data = self.blob(entry["sha256"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_bytes(path, data, int(entry["mode"], 8), _uid(entry["user"]), _gid(entry["group"]))
            changed.append(path)
        return changed

    def prune(self, keep: int, venvs_dir: str | None = None) -> list[str]:
        """Keep `keep` releases, never the way back: the current, pending and previous ones and
        the newest `keep` ready releases of distinct contents always stay; beyond `keep` records,
        failed ones go first, then duplicates (a ready release whose contents a newer one holds,
        or one never switched to), then the oldest ready ones. Removes their records, the blobs no
        kept record uses, and the venvs (with their locks) only removed releases used."""
        records = self.records()
        protected = {self.current_id(), self.pending(), self.previous_id()}
        distinct, seen = [], set()
        for record in reversed(records):  # newest first: the newest of each contents counts
            if record.get("status") == "ready" and record["fingerprint"] not in seen:
                seen.add(record["fingerprint"])
                distinct.append(record["id"])
        protected |= set(distinct[:keep])

        def order(record: Record) -> tuple[int, str]:
            if record.get("status") == "failed":
                return 0, record["id"]
            return (2 if record["id"] in distinct else 1), record["id"]

        candidates = sorted((r for r in records if r["id"] not in protected), key=order)
        old_records = candidates[: max(0, len(records) - keep)]
        removed = sorted(r["id"] for r in old_records)
        if not removed:
            return []
        kept_records = [r for r in records if r["id"] not in removed]
        used_venvs = {r["venv"] for r in kept_records}
        used_blobs = {e["sha256"] for r in kept_records for e in r["files"].values()} | {
            r["lock"]["sha256"] for r in kept_records
        }
        for record in old_records:
            venv = record["venv"]
            if venv not in used_venvs and (venvs_dir is None or os.path.dirname(venv) == venvs_dir):
                shutil.rmtree(venv, ignore_errors=True)
                state.remove(record["lock"]["path"])
            state.remove(self._path(f"{record['id']}.json"))
        for name in os.listdir(self._path("blobs")) if os.path.isdir(self._path("blobs")) else []:
            if name not in used_blobs:
                state.remove(self._path("blobs", name))
        return removed

    def previous_id(self) -> str | None:
        """Where the default rollback goes: the release that ran before the current one, as the
        switch recorded it (`previous`). A deploy's switch names the release it replaced; a
        rollback's names its own target, so rolling back twice stays there."""
        previous = self._read_id("previous")
        return previous if previous and os.path.exists(self._path(f"{previous}.json")) else None

    def set_previous(self, release_id: str | None) -> None:
        if release_id is None:
            state.remove(self._path("previous"))
        else:
            state.write_atomic(self._path("previous"), release_id + "\n", mode=0o600)

    def summary(self, with_files_of: str | None = None) -> Record:
        """Everything the controller's Releases fact needs, in one document. `with_files_of`
        (an id, or "previous") adds that release's file contents (base64) and lock; of its secret
        files only their sha1 (`secret_sha1`), which is all a --diff needs to say one changes."""
        report: Record = {
            "current": self.current_id(),
            "pending": self.pending(),
            "releases": self.records(),
            "previous": self.previous_id(),
            "lease": lease.current(self.dir),
        }
        if not with_files_of:
            return report
        try:
            if with_files_of == "previous" and report["previous"] is None:
                raise ReleaseError(f"no release ran before the current one in {self.dir} (nothing to roll back to)")
            record = self.get(report["previous"] if with_files_of == "previous" else with_files_of)
        except ReleaseError as error:
            report.update(target=None, error=str(error))
        else:
            report["target"] = record["id"]
            files = record["files"]
            report["contents"] = {
                path: base64.b64encode(self.blob(e["sha256"])).decode()
                for path, e in files.items()
                if not is_secret(path, e)
            }
            report["secret_sha1"] = {
                path: hashlib.sha1(self.blob(e["sha256"])).hexdigest()
                for path, e in files.items()
                if is_secret(path, e)
            }
            report["lock"] = self.blob(record["lock"]["sha256"]).decode()
        return report


def _silent(text: str, error: bool = False) -> None:
    pass


def _write_bytes(path: str, data: bytes, mode: int, uid: int = -1, gid: int = -1) -> None:
    temp = f"{path}.sglang-pve-new"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chown(temp, uid, gid)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        state.remove(temp)
        raise


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _uid(name: str) -> int:
    return int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid


def _gid(name: str) -> int:
    return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
