"""Package indexes as the controller sees them: nightly resolution and URLs safe to print.

`sglang_version: nightly` (or `nightly-YYYYMMDD`) is resolved here, on the controller, once per
run, against the configured indexes' PEP 503 pages: SGLang's nightlies are versioned
`<next patch>.devYYYYMMDD+g<sha>` (sgl-project/sglang .github/workflows/release-pypi-nightly.yml), so the exact version
names the commit and sorts above the last release.

    resolve_nightly("nightly", ["https://docs.sglang.ai/whl/cu130/"])  # "0.5.16.dev20260723+gc0ffee123"
    masked("https://user:token@pypi.example/simple/")                 # "https://***@pypi.example/simple/"
    netrc_text(["https://user:token@pypi.example/simple/"])
    # "machine pypi.example login user password token\n"
"""

import base64
import html
import re
import urllib.parse
import urllib.request
from functools import cache

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

TIMEOUT_S = 30
_HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.IGNORECASE)


class IndexLookupError(RuntimeError):
    """An index could not be read, or holds no matching nightly; the message says which."""


def masked(url: str) -> str:
    """The URL with any user:password@ replaced by ***@ (for output, logs and locks)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def without_credentials(url: str) -> str:
    """The URL with any user:password@ removed: what goes on a command line (netrc_text has them)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


_NETRC_TOKEN = re.compile(r"[!$%&()*+,\-./0-9:;<=>?@A-Z\[\]^_`a-z{|}~]+")  # printable, no blank, quote, backslash or #


def netrc_text(urls) -> str:
    """A netrc with the credentials of `urls` (one entry per host: pip, through requests, and uv
    look them up by host name). Credentials the format cannot carry literally, or two different
    ones for one host, raise ValueError (naming the masked URL, never the value)."""
    entries: dict[str, tuple[str, str]] = {}
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.username is None:
            continue
        login, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
        if not all(_NETRC_TOKEN.fullmatch(token) for token in (login, password)):
            raise ValueError(
                f"{masked(url)}: the user or password is empty or has a blank, quote, backslash, # or "
                "non-ASCII character, which a netrc file cannot hold; use a token without them"
            )
        if entries.setdefault(parts.hostname, (login, password)) != (login, password):
            raise ValueError(
                f"{masked(url)}: another index on {parts.hostname} has other credentials; "
                "a netrc holds one login per host: use the same token for both"
            )
    return "".join(f"machine {host} login {login} password {password}\n" for host, (login, password) in entries.items())


def wheel_versions(page: str, project: str = "sglang") -> list[Version]:
    """Versions of `project`'s wheels linked from a PEP 503 project page."""
    found = []
    for href in _HREF.findall(page):
        name = urllib.parse.unquote(html.unescape(href).split("#", 1)[0].rsplit("/", 1)[-1])
        try:
            wheel_project, version, _, _ = parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if wheel_project == project:
            found.append(version)
    return found


def is_nightly(version: Version) -> bool:
    """A nightly build: `.devYYYYMMDD` with a `+g<sha>` local label."""
    return bool(
        version.dev is not None
        and re.fullmatch(r"\d{8}", str(version.dev))
        and version.local
        and version.local.startswith("g")
    )


def pick(spec: str, versions: list[Version]) -> Version | None:
    """The newest nightly (`nightly`) or the newest of one day (`nightly-YYYYMMDD`)."""
    day = spec.removeprefix("nightly").removeprefix("-")
    nightlies = [v for v in versions if is_nightly(v) and (not day or str(v.dev) == day)]
    return max(nightlies, default=None)


def _get(url: str) -> str:
    """GET a page; credentials in the URL go into a Basic header, never into an error message."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": "text/html"}
    if "@" in parts.netloc:
        credentials, host = parts.netloc.rsplit("@", 1)
        headers["Authorization"] = "Basic " + base64.b64encode(urllib.parse.unquote(credentials).encode()).decode()
        url = urllib.parse.urlunsplit(parts._replace(netloc=host))
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as response:
            return response.read().decode("utf-8", "replace")
    except OSError as error:
        raise IndexLookupError(f"cannot read {masked(url)}: {getattr(error, 'reason', error)}") from None


@cache
def resolve_nightly(spec: str, index_urls: tuple[str, ...], project: str = "sglang") -> str:
    """The exact version `spec` names on the indexes (cached: resolved once per run)."""
    versions = []
    for url in index_urls:
        versions += wheel_versions(_get(url.rstrip("/") + f"/{project}/"), project)
    chosen = pick(spec, versions)
    if chosen is None:
        nightlies = sorted(str(v) for v in versions if is_nightly(v))
        where = ", ".join(masked(u) for u in index_urls)
        raise IndexLookupError(
            f"no {project} {spec} on {where} (nightlies there: {', '.join(nightlies[-5:]) or 'none'})"
        )
    return str(chosen)
