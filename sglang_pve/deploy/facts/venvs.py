"""An SGLang virtualenv, its lock and the installer, in one remote command."""

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

_VERSION = "import importlib.metadata as m; print('version', m.version('sglang'))"


@dataclass(frozen=True)
class VenvState:
    version: str | None  # sglang installed in the venv; None: no venv, "": a venv without sglang
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

    def command(self, venv, lock, uv):
        python, lock, uv_bin = (shlex.quote(p) for p in (f"{venv}/bin/python", lock, f"{uv}/bin/uv"))
        return (
            f"if [ -x {python} ]; then {python} -c {shlex.quote(_VERSION)} 2>/dev/null || echo version; fi; "
            f"if [ -f {lock} ]; then echo lock $(sha256sum < {lock} | cut -d' ' -f1); fi; "
            f"if [ -x {uv_bin} ]; then echo uv $({uv_bin} --version | cut -d' ' -f2); fi; true"
        )

    def process(self, output):
        found = dict(
            (line.split(" ", 1) + [""])[:2] for line in output if line.split(" ", 1)[0] in ("version", "lock", "uv")
        )
        return VenvState(found.get("version"), found.get("lock") or None, found.get("uv") or None)
