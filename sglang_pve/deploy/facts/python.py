"""Facts about Python on the target: asked of the host, never assumed (3.11 in the lab, 3.12 on Ubuntu 24.04)."""

import shlex

from pyinfra.api import FactBase

from sglang_pve.agent.contract import TARGET_PYTHON

# The "venv" install scheme exists from Python 3.11; distributions patch the default scheme
# (Debian: posix_local -> /usr/local/...), so the venv scheme is the one that matches `python3 -m venv`.
_PURELIB = (
    "import sys, sysconfig; base = sys.argv[1]; "
    "scheme = 'venv' if 'venv' in sysconfig.get_scheme_names() else 'posix_prefix'; "
    "print(sysconfig.get_path('purelib', scheme, {'base': base, 'platbase': base}))"
)


class VenvSitePackages(FactBase[str | None]):
    """site-packages of a virtualenv that `python3 -m venv <path>` makes (or made) on the host.

    host.get_fact(VenvSitePackages, path="/opt/sglang/venvs/sglang-0.5.16")
    # "/opt/sglang/venvs/sglang-0.5.16/lib/python3.11/site-packages"
    """

    def requires_command(self, path):
        return TARGET_PYTHON

    def command(self, path):
        return f"{TARGET_PYTHON} -c {shlex.quote(_PURELIB)} {shlex.quote(path)}"

    def process(self, output):
        return output[-1].strip() if output else None
