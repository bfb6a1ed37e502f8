"""Index credentials are a secret source like the others: never in data, errors or argv; plain
http only to named hosts; a login never follows a redirect to another origin."""

import base64
import functools
import http.server
import threading

import pytest

from sglang_pve.config import ConfigError, load_deployment
from sglang_pve.deploy import index
from sglang_pve.deploy.operations import venvs
from tests.conftest import PROJECT, group_data

CANARY = "canary-index-9d31f0"  # never printed: asserted on by count only
CREDENTIALS = {"idx.example": {"login": "__token__", "password": {"env": "SGLANG_PVE_TEST_INDEX_TOKEN"}}}


def load(**changes):
    return load_deployment("sglang1", group_data("all") | changes, PROJECT)


def refusal(**changes) -> str:
    with pytest.raises(ConfigError) as caught:
        load(**changes)
    return str(caught.value)


def test_a_url_with_credentials_is_refused_shown_masked():
    for changes in (
        {"sglang_index_url": f"https://u:{CANARY}@idx.example/simple/"},
        {"sglang_extra_index_urls": [f"https://u:{CANARY}@idx.example/whl/"]},
        {"sglang_index_url": f"https://u:{CANARY} x@idx.example/simple/"},  # fails the URL pattern: still masked
    ):
        shown = refusal(**changes)
        assert shown.count(CANARY) == 0 and "***@idx.example" in shown, shown.replace(CANARY, "<canary>")
    assert "sglang_index_credentials" in refusal(sglang_index_url=f"https://u:{CANARY}@idx.example/simple/")


def test_the_login_comes_from_its_secret_source_and_reaches_only_the_netrc(monkeypatch):
    monkeypatch.setenv("SGLANG_PVE_TEST_INDEX_TOKEN", CANARY)
    deployment = load(sglang_index_url="https://idx.example/simple/", sglang_index_credentials=CREDENTIALS)
    (only,) = deployment.index_logins
    assert (only.host, only.login, only.password.value == CANARY) == ("idx.example", "__token__", True)
    assert repr(deployment).count(CANARY) == 0 and repr(deployment.data).count(CANARY) == 0
    source = venvs.Source(index_url="https://idx.example/simple/", logins=deployment.index_logins)
    assert source.netrc.content.count(CANARY) == 1 and source.netrc.secret
    assert repr(source).count(CANARY) == 0  # what pyinfra may print of the operation's arguments


def test_a_missing_or_unfit_password_is_named_by_its_source_never_shown(monkeypatch):
    data = {"sglang_index_url": "https://idx.example/simple/", "sglang_index_credentials": CREDENTIALS}
    monkeypatch.delenv("SGLANG_PVE_TEST_INDEX_TOKEN", raising=False)
    assert "sglang_index_credentials.idx.example.password = 'SGLANG_PVE_TEST_INDEX_TOKEN'" in refusal(**data)
    monkeypatch.setenv("SGLANG_PVE_TEST_INDEX_TOKEN", CANARY + "#x")  # a netrc would read # as a comment
    shown = refusal(**data)
    assert shown.count(CANARY) == 0 and "<hidden>" in shown and "netrc" in shown


def test_a_login_field_holding_a_token_is_not_echoed():
    bad = {"idx.example": {"login": f"{CANARY} pasted", "password": {"env": "X"}}}
    shown = refusal(sglang_index_url="https://idx.example/simple/", sglang_index_credentials=bad)
    assert shown.count(CANARY) == 0 and "not a valid login name (value not shown)" in shown


def test_credentials_for_a_host_without_an_index_are_refused(monkeypatch):
    monkeypatch.setenv("SGLANG_PVE_TEST_INDEX_TOKEN", CANARY)
    shown = refusal(sglang_index_credentials=CREDENTIALS)
    assert "sglang_index_credentials.idx.example = 'idx.example': no index URL is on this host" in shown


def test_plain_http_only_to_a_named_host():
    shown = refusal(sglang_index_url="http://mirror.lan/simple/")
    assert "sglang_index_url = 'http://mirror.lan/simple/': plain http" in shown and "sglang_index_http_hosts" in shown
    assert refusal(sglang_extra_index_urls=["http://mirror.lan/whl/"]).count("plain http") == 1
    load(sglang_index_url="http://mirror.lan/simple/", sglang_index_http_hosts=["mirror.lan"])
    lab = group_data("all", "lab")  # the lab's index: plain http on its bridge, named
    assert lab["sglang_index_url"].startswith("http://") and lab["sglang_index_http_hosts"]


# --- redirects ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, keeps",
    [  # requests' own cases (psf/requests, test_requests.py: test_should_strip_auth_*)
        ("http://example.com/foo", "http://example.com/bar", True),
        ("http://example.com/foo", "https://example.com/bar", True),  # the upgrade on standard ports
        ("http://example.com:80/foo", "https://example.com/bar", True),
        ("http://example.com/foo", "https://example.com:443/bar", True),
        ("https://example.com/foo", "http://example.com/bar", False),  # the downgrade
        ("http://example.com:8080/foo", "https://example.com/bar", False),
        ("https://example.com:443/foo", "https://example.com/bar", True),
        ("https://example.com/foo", "https://example.com:1234/bar", False),
        ("http://example.com/foo", "http://another.example.com/bar", False),
        ("https://example.com/foo", "https://evil.example/", False),
    ],
)
def test_same_origin_follows_requests_should_strip_auth(old, new, keeps):
    assert index.same_origin(old, new) is keeps


@pytest.fixture
def two_servers(tmp_path):
    """An index on 127.0.0.1 that redirects its project page to the same page on `localhost`
    (another host name: another origin), and the Authorization header each one received."""
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "index.html").write_text('<a href="sglang-0.5.16.dev20260723+gc0ffee123-py3-none-any.whl">')
    seen: dict[str, list] = {"127.0.0.1": [], "localhost": []}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            host = self.headers["Host"].split(":")[0]
            seen[host].append(self.headers.get("Authorization"))
            if host == "127.0.0.1" and self.path.startswith("/away/"):
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{port}/sglang/")
                self.end_headers()
            elif host == "127.0.0.1" and self.path.startswith("/here/"):
                self.send_response(301)
                self.send_header("Location", f"http://127.0.0.1:{port}/sglang/")
                self.end_headers()
            else:
                super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path)))
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port, seen
    server.shutdown()


def test_the_login_never_follows_a_redirect_to_another_host(two_servers):
    from sglang_pve.config.indexes import IndexLogin
    from sglang_pve.config.secrets import Secret

    port, seen = two_servers
    logins = (IndexLogin("127.0.0.1", "u", Secret(CANARY, "environment variable T")),)
    sent = "Basic " + base64.b64encode(f"u:{CANARY}".encode()).decode()
    assert "gc0ffee123" in index._get(f"http://127.0.0.1:{port}/away/", logins)
    assert seen == {"127.0.0.1": [sent], "localhost": [None]}  # followed, without the login
    seen["127.0.0.1"].clear()
    assert "gc0ffee123" in index._get(f"http://127.0.0.1:{port}/here/", logins)
    assert seen["127.0.0.1"] == [sent, sent]  # the same origin keeps it
