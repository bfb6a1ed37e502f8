"""Package indexes in data: URLs without credentials, plain http only to the hosts data names,
each index host's login with its password from a secret source (config/secrets.py).

    sglang_index_url = "https://pypi.example/simple/"
    sglang_index_credentials = {"pypi.example": {"login": "__token__", "password": {"env": "PYPI_TOKEN"}}}
    sglang_index_http_hosts = ["10.0.3.1"]   # a mirror on a trusted bridge: http:// allowed to it

The password is read on the controller like every secret and reaches the installers only through
the root-only netrc (deploy/operations/venvs.py); a URL with user:password@ in it is refused, and
shown masked (masked()), since data is printed whole (pyinfra's debug-inventory, a problem's value).
"""

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from sglang_pve.config.errors import HIDDEN, Problem
from sglang_pve.config.secrets import Secret, SecretSource, read_secret

# A DNS name or an IPv4 address, as urllib.parse gives a URL's hostname (lowercase)
Hostname = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")]
# What a netrc token can hold literally: printable ASCII without blank, quote, backslash or #
NETRC_TOKEN = re.compile(r"[!$%&()*+,\-./0-9:;<=>?@A-Z\[\]^_`a-z{|}~]{1,256}")
URL_KEYS = ("sglang_index_url", "sglang_extra_index_urls")


class IndexCredential(BaseModel):
    """One index host's login: the login is a name (e.g. "__token__"), the password a secret source."""

    model_config = ConfigDict(extra="forbid", strict=True)
    login: str = Field(pattern=f"^{NETRC_TOKEN.pattern}$")
    password: SecretSource


@dataclass(frozen=True)
class IndexLogin:
    """A login read on the controller; its password never shows (Secret)."""

    host: str
    login: str
    password: Secret


def masked(url: str) -> str:
    """The URL with any user:password@ replaced by ***@ (for problems, output and logs).

    >>> masked("https://user:token@pypi.example/simple/")
    'https://***@pypi.example/simple/'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed [ in the host: show nothing of what may be a credential
        return "<an unreadable URL>"
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def _urls(data: Any) -> list[tuple[str, str]]:
    return [("sglang_index_url", data.sglang_index_url)] + [
        (f"sglang_extra_index_urls.{i}", url) for i, url in enumerate(data.sglang_extra_index_urls)
    ]


def _credentials_problem(key: str, url: str) -> Problem | None:
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return None
    return Problem(
        key,
        masked(url),
        "holds credentials (user:password@): data is printed whole (debug-inventory, errors)",
        "drop them from the URL and name them as a secret: sglang_index_credentials = "
        f'{{"{parts.hostname}": {{"login": "...", "password": {{"env": "VARIABLE"}}}}}} '
        '(or {"file": "/path/to/0600-file"})',
    )


def url_credential_problems(data: Mapping[str, object]) -> list[Problem]:
    """Index URLs with user:password@ in raw host data (before the model: the connectors refuse
    them before debug-inventory prints the data, provision/keepalive.py)."""
    extra = data.get("sglang_extra_index_urls")
    urls = [("sglang_index_url", data.get("sglang_index_url"))] + [
        (f"sglang_extra_index_urls.{i}", url) for i, url in enumerate(extra if isinstance(extra, list) else [])
    ]
    found = [_credentials_problem(key, url) for key, url in urls if isinstance(url, str)]
    return [problem for problem in found if problem is not None]


def index_problems(data: Any) -> list[Problem]:
    """The rules across the index keys of HostData (`data`), every one at once, no credential shown."""
    problems = []
    hosts = set()
    for key, url in _urls(data):
        parts = urllib.parse.urlsplit(url)
        hosts.add(parts.hostname)
        if credentials := _credentials_problem(key, url):
            problems.append(credentials)
        if parts.scheme == "http" and parts.hostname not in data.sglang_index_http_hosts:
            problems.append(
                Problem(
                    key,
                    masked(url),
                    "plain http: whoever is on the path reads the credentials and may serve other files",
                    f"use https, or name {parts.hostname} in sglang_index_http_hosts (a mirror on a trusted network)",
                )
            )
    for host in data.sglang_index_credentials:
        if host not in hosts:
            problems.append(
                Problem(
                    f"sglang_index_credentials.{host}",
                    host,
                    "no index URL is on this host: the login would never be used",
                    f"use the host of an index URL ({', '.join(sorted(h for h in hosts if h))}), or remove it",
                )
            )
    return problems


def read_index_logins(
    data: Any, environ: Mapping[str, str] = os.environ
) -> tuple[tuple[IndexLogin, ...], list[Problem]]:
    """Every login of data.sglang_index_credentials with its password read now; problems name the
    source, never the value."""
    logins, problems = [], []
    for host, credential in data.sglang_index_credentials.items():
        key = f"sglang_index_credentials.{host}.password"
        secret, problem = read_secret(key, credential.password, environ)
        if problem:
            problems.append(problem)
            continue
        assert secret is not None  # read_secret gives a secret or a problem
        if not NETRC_TOKEN.fullmatch(secret.value):
            problems.append(
                Problem(
                    key,
                    HIDDEN,
                    f"the password from {credential.password.describe()} has a # or a character a netrc cannot hold",
                    "use a token of printable ASCII without blanks, quotes, backslash or #",
                )
            )
            continue
        logins.append(IndexLogin(host, credential.login, secret))
    return tuple(logins), problems
