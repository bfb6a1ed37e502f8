"""An SGLang virtualenv, its lock and the installer, in one remote command."""

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from sglang_pve.agent.preflight_probe import VERSION


@dataclass(frozen=True)
class VenvState:
    version: str | None  # the distribution installed in the venv; None: no venv, "": a venv without it
    lock_sha256: str | None  # of the lock beside it
    uv: str | None  # version of the installer in paths.UV_VENV


class SglangVenv(FactBase[VenvState]):
    """What a venv holds, the digest of its lock and the uv version.

    host.get_fact(SglangVenv, venv="/opt/sglang/venvs/sglang-0.5.16...", lock="/opt/sglang/venvs/sglang-0.5.16....lock",
                  uv="/opt/sglang-pve/uv")
    # VenvState(version="0.5.16.dev20260720+g8905cbd42", lock_sha256="9f2c...", uv="0.13.9")
    """

    @staticmethod
    def default() -> VenvState:
        return VenvState(None, None, None)

    def command(self, venv, lock, uv, distribution="sglang"):
        python, lock, uv_bin = (shlex.quote(p) for p in (f"{venv}/bin/python", lock, f"{uv}/bin/uv"))
        name = shlex.quote(distribution)
        return (
            f"if [ -x {python} ]; then echo version $({python} -I -c {shlex.quote(VERSION)} {name} 2>/dev/null); fi; "
            f"if [ -f {lock} ]; then echo lock $(sha256sum < {lock} | cut -d' ' -f1); fi; "
            f"if [ -x {uv_bin} ]; then echo uv $({uv_bin} --version | cut -d' ' -f2); fi; true"
        )

    def process(self, output):
        found = dict(
            (line.split(" ", 1) + [""])[:2] for line in output if line.split(" ", 1)[0] in ("version", "lock", "uv")
        )
        return VenvState(found.get("version"), found.get("lock") or None, found.get("uv") or None)


@dataclass(frozen=True)
class DirOwner:
    path: str
    uid: int
    mode: int  # permission bits, e.g. 0o755

    def problem(self) -> str | None:
        """Why a root install may not put code under this directory, or None: whoever owns it or
        may write it can swap the venv (or a parent) for their own, which root then runs."""
        said = f"{self.path} (owner uid {self.uid}, mode {self.mode:04o})"
        if self.uid != 0:
            return f"{said} is not owned by root"
        if self.mode & 0o022:
            return f"{said} is writable by {'others' if self.mode & 0o002 else 'its group'}"
        return None


class VenvParents(FactBase[list[DirOwner]]):
    """Owner and mode of the venvs directory and each of its parents that exists (links followed:
    the directory they lead to counts).

    host.get_fact(VenvParents, path="/opt/sglang/venvs")
    # [DirOwner("/opt/sglang/venvs", 0, 0o755), DirOwner("/opt/sglang", 0, 0o755), DirOwner("/opt", 0, 0o755), ...]
    """

    @staticmethod
    def default() -> list[DirOwner]:
        return []

    def command(self, path):
        chain, parent = [], path
        while True:
            chain.append(shlex.quote(parent))
            if parent == "/":
                break
            parent = parent.rsplit("/", 1)[0] or "/"
        return f"for p in {' '.join(chain)}; do stat -L -c '%u %a %n' -- \"$p\" 2>/dev/null; done; true"

    def process(self, output):
        found = []
        for line in output:
            uid, mode, path = line.split(" ", 2)
            found.append(DirOwner(path, int(uid), int(mode, 8)))
        return found
