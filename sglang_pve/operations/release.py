"""The pinned SGLang build, in its own virtualenv; earlier versions' venvs are kept for rollback."""

from pyinfra import host
from pyinfra.api import HiddenValue, QuoteString, StringCommand, operation

from ..facts.python import InstalledDistribution


def _index_args(index_url: str, extra_index_urls: list[str]) -> list:
    """pip index options; URLs carrying credentials (user:token@) are masked in pyinfra's output."""
    args = []
    for flag, url in [("--index-url", index_url)] + [("--extra-index-url", u) for u in extra_index_urls]:
        args += [flag, QuoteString(HiddenValue(url) if "@" in url else url)]
    return args


@operation()
def installed(venv: str, version: str, index_url: str, extra_index_urls: list[str] | None = None):
    """
    Install exactly sglang==version into venv, creating the venv with the host's python3.

    + venv: virtualenv path, one per version (paths.venv_path)
    + version: the pinned version, e.g. a nightly "0.5.16.dev20260720+g8905cbd42"
    + index_url / extra_index_urls: where pip finds it (nightlies live on SGLang's wheel index)

    **Example:**

    .. code:: python

        installed(venv="/opt/sglang/venvs/sglang-0.5.15", version="0.5.15",
                  index_url="https://pypi.org/simple")
    """
    current = host.get_fact(InstalledDistribution, venv=venv, distribution="sglang")
    if current == version:
        host.noop(f"sglang {version} is installed in {venv}")
        return
    if current is None:
        yield StringCommand("python3", "-m", "venv", QuoteString(venv))
    pip = QuoteString(f"{venv}/bin/pip")
    yield StringCommand(
        pip, "install", "--disable-pip-version-check", "--no-input", *_index_args(index_url, extra_index_urls or []),
        QuoteString(f"sglang=={version}"),
    )
    # What got resolved, next to the venv: the lock to rebuild this exact release from.
    yield StringCommand(pip, "freeze", "--all", ">", QuoteString(f"{venv}/sglang-pve.lock.txt"))
