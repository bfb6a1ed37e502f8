"""Package indexes as the controller sees them: nightly resolution and URLs safe to print.

`sglang_version: nightly` (or `nightly-YYYYMMDD`) is resolved here, on the controller, once per
run, against the configured indexes' PEP 503 pages: SGLang's nightlies are versioned
`<next patch>.devYYYYMMDD+g<sha>` (sgl-project/sglang .github/workflows/release-pypi-nightly.yml), so the exact version
names the commit and sorts above the last release.

    resolve_nightly("nightly", ("https://docs.sglang.ai/whl/cu130/",))  # "0.5.16.dev20260723+gc0ffee123"
    netrc_text(deployment.index_logins)  # "machine pypi.example login __token__ password ...\n"

The controller's own reads (nightly resolution) send an index's login only to that index's
host: never in the URL, and never on to another origin on a redirect (_OwnOriginRedirects).
"""

import base64
import html
import re
import urllib.parse
import urllib.request
from collections.abc import Iterable
from functools import cache

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglang_pve.config.indexes import IndexLogin, masked

TIMEOUT_S = 30
_HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.IGNORECASE)


class IndexLookupError(RuntimeError):
    """An index could not be read, or holds no matching nightly; the message says which."""


def netrc_text(logins: Iterable[IndexLogin]) -> str:
    """A netrc with one entry per index host: pip (through requests, which asks it again for a
    redirect's host: psf/requests sessions.py SessionRedirectMixin.rebuild_auth) and uv look a
    login up by the host they ask, so no other host gets it. The config model checked every
    token (config/indexes.py NETRC_TOKEN)."""
    return "".join(f"machine {i.host} login {i.login} password {i.password.value}\n" for i in logins)


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


def same_origin(old: str, new: str) -> bool:
    """Whether a redirect from `old` to `new` may keep the Authorization header: the rule of
    requests (psf/requests src/requests/sessions.py SessionRedirectMixin.should_strip_auth, 2.34):
    the same host, and the same scheme and port, except http:80 -> https:443 on the same host."""
    before, after = urllib.parse.urlsplit(old), urllib.parse.urlsplit(new)
    if before.hostname != after.hostname:
        return False
    if (before.scheme, before.port, after.scheme, after.port) in {
        ("http", None, "https", None),
        ("http", 80, "https", None),
        ("http", None, "https", 443),
        ("http", 80, "https", 443),
    }:
        return True
    defaults = {"http": 80, "https": 443}
    return before.scheme == after.scheme and (before.port or defaults.get(before.scheme)) == (
        after.port or defaults.get(after.scheme)
    )


class _OwnOriginRedirects(urllib.request.HTTPRedirectHandler):
    """CPython's redirect_request copies every header of the request to the next one, Authorization
    included, whatever host the Location names (python/cpython Lib/urllib/request.py
    HTTPRedirectHandler.redirect_request: `newheaders = {k: v for k, v in req.headers.items() ...}`).
    _get sends the login as an unredirected header (which that copy leaves out) and this gives it
    back only where same_origin says so."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        login = req.unredirected_hdrs.get("Authorization")
        if new is not None and login and same_origin(req.full_url, new.full_url):
            new.add_unredirected_header("Authorization", login)
        return new


_OPENER = urllib.request.build_opener(_OwnOriginRedirects)


def _get(url: str, logins: Iterable[IndexLogin] = ()) -> str:
    """GET a page, with the login of its host (Basic) when there is one; errors name the URL only."""
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    host = urllib.parse.urlsplit(url).hostname
    for login in logins:
        if login.host == host:
            token = base64.b64encode(f"{login.login}:{login.password.value}".encode()).decode()
            request.add_unredirected_header("Authorization", f"Basic {token}")
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            return response.read().decode("utf-8", "replace")
    except OSError as error:
        raise IndexLookupError(f"cannot read {masked(url)}: {getattr(error, 'reason', error)}") from None


@cache
def resolve_nightly(
    spec: str, index_urls: tuple[str, ...], logins: tuple[IndexLogin, ...] = (), project: str = "sglang"
) -> str:
    """The exact version `spec` names on the indexes (cached: resolved once per run)."""
    versions = []
    for url in index_urls:
        versions += wheel_versions(_get(url.rstrip("/") + f"/{project}/", logins), project)
    chosen = pick(spec, versions)
    if chosen is None:
        nightlies = sorted(str(v) for v in versions if is_nightly(v))
        where = ", ".join(masked(u) for u in index_urls)
        raise IndexLookupError(
            f"no {project} {spec} on {where} (nightlies there: {', '.join(nightlies[-5:]) or 'none'})"
        )
    return str(chosen)
