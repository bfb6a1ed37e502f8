"""The version of this distribution, read back from its single source, pyproject.toml."""

from importlib import metadata
from pathlib import Path


def _version() -> str:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        # Run from the source tree (unit tests): read pyproject.toml next to the package.
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        with pyproject.open("rb") as f:
            return tomllib.load(f)["project"]["version"]


__version__ = _version()
