"""A small client over proxmoxer's https backend: auth (a root@pam ticket from a password, or an
API token), the node's certificate trusted as the settings say, booleans sent as 1/0, every task
awaited with a timeout, and errors that name the call (method and path) and Proxmox's message,
never a secret.

    api = connect(settings, credential)
    config = api.get(f"nodes/pve1/lxc/129/config")
    api.run_task("POST", "nodes/pve1/lxc/129/status/start")      # waits; raises ProxmoxError
"""

import logging
import re
import time
import urllib.parse
from collections import Counter
from typing import TypeGuard, TypeVar

import requests
from proxmoxer.backends.https import (
    JsonSerializer,
    ProxmoxHTTPApiTokenAuth,
    ProxmoxHTTPAuth,
    ProxmoxHTTPAuthBase,
    ProxmoxHttpSession,
)
from proxmoxer.core import ProxmoxResource, ResourceException

from sglang_pve.config.proxmox import ApiSettings
from sglang_pve.config.safe import printable
from sglang_pve.provision.credentials import Credential
from sglang_pve.provision.tls import trust

POLL_INTERVAL_S = 0.5
TASK_LOG_LINES = 10  # of what a failed task printed, in its error
K = TypeVar("K")
_TASK_END = re.compile(r"^TASK (OK|WARNINGS: \d+|ERROR: .*)$")


class ProxmoxError(RuntimeError):
    """A call that failed: `call` is "METHOD /path"; the message says what Proxmox answered."""

    def __init__(self, call: str, message: str):
        self.call, self.message = call, message
        super().__init__(f"{call}: {message}")


def task_succeeded(exitstatus: str | None) -> TypeGuard[str]:
    """pve-common UPID.pm status_is_error: OK and "WARNINGS: n" are success, anything else is the error."""
    return exitstatus == "OK" or (exitstatus or "").startswith("WARNINGS: ")


def worker_lines(lines: list[str]) -> list[str]:
    """A task log's last lines as the worker printed them: without the closing line fork_worker
    adds (TASK OK, TASK WARNINGS: n, TASK ERROR: <the exit status, already said>), without the
    "no content" placeholder of an empty log (pve-common Tools.pm dump_logfile)."""
    if lines and _TASK_END.match(lines[-1]):
        lines = lines[:-1]
    if lines == ["no content"]:
        return []
    return [line for line in lines if line.strip()][-TASK_LOG_LINES:]


def tfa_refusal(user: str) -> str:
    """What to say when POST /access/ticket answers NeedTFA (pve-access-control
    src/PVE/API2/AccessControl.pm create_ticket_do): the ticket is half a login, every call
    with it would be refused with 401, and an unattended run has no second factor to give."""
    return (
        f"{user} has two-factor authentication: Proxmox wants a second factor (NeedTFA) that an unattended "
        "run cannot give, and every call with this half ticket would be refused with 401. Fix: use an API "
        f"token (pveum user token add {user} deploy --privsep 0; then proxmox_api.token_name: deploy and "
        "token_env or token_file); a token may not configure device passthrough, so set container.passthrough: "
        "raw, or use a user without two-factor authentication"
    )


def wire(params: dict) -> dict:
    """Form values as Proxmox reads them: booleans 1/0 (a Python True would arrive as "True"), None dropped."""
    return {k: (int(v) if isinstance(v, bool) else v) for k, v in params.items() if v is not None}


class _PinnedTicketAuth(ProxmoxHTTPAuth):
    """proxmoxer's ticket auth, but the ticket request (which carries the password) goes through the
    client's own session, so the same TLS trust (CA file or pinned fingerprint) applies to it."""

    pve_auth_ticket: str  # proxmoxer's attribute, set by _get_new_tokens

    def __init__(self, session: requests.Session, username: str, password: str, base_url: str, timeout: int):
        self._session = session
        super().__init__(username, password, base_url=base_url, timeout=timeout, verify_ssl=session.verify)

    def _get_new_tokens(self, password=None, otp=None, otptype=None):
        data = {"username": self.username, "password": password or self.pve_auth_ticket}
        response = self._session.request(
            "POST",
            self.base_url + "/access/ticket",
            data=data,
            timeout=self.timeout,
            auth=ProxmoxHTTPAuthBase(timeout=self.timeout, verify_ssl=self._session.verify),
        )
        if response.status_code != 200:
            raise ProxmoxError(
                "POST /access/ticket", f"{response.status_code} authentication failed for {self.username}"
            )
        ticket = response.json()["data"]
        if ticket.get("NeedTFA"):
            raise ProxmoxError("POST /access/ticket", tfa_refusal(self.username))
        self.birth_time = time.monotonic()
        self.pve_auth_ticket = ticket["ticket"]
        self.csrf_prevention_token = ticket["CSRFPreventionToken"]


class RedirectRefused(requests.exceptions.RequestException):
    """The node answered with a redirect, which the client never follows (_NoRedirects)."""

    def __init__(self, status: int, location: str, **kwargs):
        self.status, self.location = status, location
        super().__init__(f"HTTP {status} redirect", **kwargs)


class _NoRedirects(ProxmoxHttpSession):
    """proxmoxer's session, following no redirect. requests follows them (Session.resolve_redirects)
    and strips only the Authorization header on the way to another host (psf/requests
    src/requests/sessions.py SessionRedirectMixin.rebuild_auth / should_strip_auth): the ticket
    cookie proxmoxer sends with every request is made without a domain (proxmoxer
    proxmoxer/backends/https.py ProxmoxHTTPAuth.get_cookies: cookiejar_from_dict), so every host
    matches it; the CSRFPreventionToken header stays; a 307/308 re-sends the POST body, which for
    /access/ticket is the password. The node's API answers every call itself: a redirect is an error."""

    def resolve_redirects(self, resp, req, *args, **kwargs):
        location = self.get_redirect_target(resp)
        if location:
            raise RedirectRefused(resp.status_code, location, request=req, response=resp)
        return iter(())


class Api:
    """Calls by path ("nodes/pve1/lxc"), counted per method in `calls` (the benchmark reads them)."""

    def __init__(self, root: ProxmoxResource, settings: ApiSettings, credential: Credential):
        self._root = root
        self.settings = settings
        self.uses_token = credential.token_name is not None
        self.calls: Counter = Counter()

    def request(self, method: str, path: str, **params):
        call = f"{method} /{path}"
        self.calls[method] += 1
        resource = self._root(path)
        try:
            return getattr(resource, method.lower())(**wire(params))
        except ResourceException as error:
            detail = error.errors if isinstance(error.errors, dict) and error.errors else None
            reason = f"{error.status_code} {error.content}".strip()
            raise ProxmoxError(call, f"{reason}{f' ({detail})' if detail else ''}") from None
        except requests.exceptions.RequestException as error:
            raise transport_error(call, self.settings, error) from None

    def get(self, path: str, **params):
        return self.request("GET", path, **params)

    def run_task(self, method: str, path: str, **params) -> str:
        """A call that starts a Proxmox task: wait for it; its exit status (OK or WARNINGS: n)."""
        upid = self.request(method, path, **params)
        return self.wait(upid, f"{method} /{path}")

    def wait(self, upid: str, call: str) -> str:
        result = self.wait_all({0: (upid, call)})[0]
        if isinstance(result, ProxmoxError):
            raise result
        return result

    def wait_all(self, tasks: dict[K, tuple[str, str]]) -> dict[K, str | ProxmoxError]:
        """Tasks that run at once ({key: (UPID, "METHOD /path" that started it)}: a node's creates,
        its starts; PVE forks a worker per task, pve-common RESTEnvironment.pm fork_worker), awaited
        together under one deadline. A poll reads, for a node with several of them running, its
        task list (GET /nodes/{node}/tasks source=active: the running ones say RUNNING, pve-manager
        PVE/API2/Tasks.pm node_tasks) and then the status of each one that left it; a lone task's
        status directly: one read per node per poll, and one more per task that ended. Each key's
        exit status (OK or WARNINGS: n), or the ProxmoxError of its failure: every task's."""
        deadline = time.monotonic() + self.settings.task_timeout_s
        results: dict[K, str | ProxmoxError] = {}
        running = dict(tasks)
        while running:
            for key in self._ended_now(running):
                upid, call = running.pop(key)
                try:
                    status = self.get(f"nodes/{upid.split(':')[1]}/tasks/{upid}/status")
                    if status.get("status") != "stopped":  # listed as ended a moment early: next poll
                        running[key] = (upid, call)
                        continue
                    results[key] = self._ended(upid, call, status.get("exitstatus"))
                except ProxmoxError as error:
                    results[key] = error
            if running and time.monotonic() > deadline:
                for key, (upid, call) in running.items():
                    results[key] = ProxmoxError(
                        call,
                        f"task {upid} still running after {self.settings.task_timeout_s}s "
                        "(proxmox_api.task_timeout_s); it goes on on the node: check its task log, "
                        "then run again",
                    )
                break
            if running:
                time.sleep(POLL_INTERVAL_S)
        return results

    def _ended_now(self, running: dict[K, tuple[str, str]]) -> list[K]:
        """The keys of the tasks that may have ended: each lone task of a node; of a node with
        several, those its active task list no longer shows RUNNING (all of them if it cannot be read)."""
        by_node: dict[str, list[K]] = {}
        for key, (upid, _) in running.items():
            by_node.setdefault(upid.split(":")[1], []).append(key)
        ended = []
        for node, keys in by_node.items():
            if len(keys) == 1:
                ended += keys
                continue
            try:
                listed = self.get(f"nodes/{node}/tasks", source="active", limit=len(keys) + 1000)
            except ProxmoxError:
                ended += keys
                continue
            still = {entry.get("upid") for entry in listed if entry.get("status") == "RUNNING"}
            ended += [key for key in keys if running[key][0] not in still]
        return ended

    def _ended(self, upid: str, call: str, exitstatus: str | None) -> str | ProxmoxError:
        node = upid.split(":")[1]
        if not task_succeeded(exitstatus):
            return ProxmoxError(call, f"task failed: {exitstatus}{self._log_tail(node, upid)}")
        if exitstatus != "OK":  # "WARNINGS: n": done, but say what Proxmox warned about
            logging.getLogger("pyinfra").warning(f"{call}: task ended with {exitstatus}{self._log_tail(node, upid)}")
        return exitstatus

    def _log_tail(self, node: str, upid: str) -> str:
        """What the worker printed before it ended (the whole log: limit 0), for the error."""
        try:
            entries = self.get(f"nodes/{node}/tasks/{upid}/log", start=0, limit=0)
        except ProxmoxError:
            return ""
        tail = worker_lines([entry.get("t", "") for entry in entries])
        return f" (task log: {' | '.join(tail)})" if tail else ""


def transport_error(call: str, settings: ApiSettings, error: requests.exceptions.RequestException) -> ProxmoxError:
    where = f"{settings.host}:{settings.port}"
    if isinstance(error, RedirectRefused):
        try:
            to = urllib.parse.urlsplit(error.location).hostname or "the same host"
        except ValueError:  # e.g. an unclosed [ in the host
            to = "an unreadable location"
        return ProxmoxError(
            call,
            f"{where} answered {error.status} with a redirect to {printable(to)}: not followed (the API "
            "password, ticket and token go to the node's API only). Fix: proxmox_api.host and port must name "
            "the node's API itself (pveproxy, 8006), not a proxy in front of it",
        )
    if isinstance(error, requests.exceptions.SSLError):
        return ProxmoxError(
            call,
            f"TLS verification of {where} failed: {_root_cause(error)}. Fix: compare "
            "proxmox_api.fingerprint/ca_file with the node's certificate (pvenode cert info)",
        )
    if isinstance(error, requests.exceptions.Timeout):
        unanswered = f"no answer from {where} within {settings.timeout_s}s (proxmox_api.timeout_s)"
        if not call.startswith("GET "):  # the node may have it, and may carry it out yet
            unanswered += (
                f"; the node may still carry out this {call.split()[0]}: run again, which reads what the node "
                "has before it changes anything"
            )
        return ProxmoxError(call, unanswered)
    return ProxmoxError(call, f"node unreachable at {where}: {_root_cause(error)}")


def _root_cause(error: BaseException) -> str:
    """The innermost reason requests/urllib3 wrapped ("Fingerprints did not match ...", "Connection refused")."""
    for _ in range(10):
        inner = error.args[0] if error.args and isinstance(error.args[0], BaseException) else error.__context__
        if inner is None:
            break
        error = inner
    text = str(error)
    return text.split("] ", 1)[-1] if text.startswith("[") else (text or type(error).__name__)


def connect(settings: ApiSettings, credential: Credential) -> Api:
    """A client for one node's API; a password logs in at once (POST /access/ticket)."""
    base_url = f"https://{settings.host}:{settings.port}/api2/json"
    if not settings.verify:
        logging.getLogger("pyinfra").warning(
            f"{settings.host}:{settings.port}: TLS verification is off (proxmox_api.verify: false): whoever sits "
            "on the path sees the API password or token; pin the fingerprint instead (pvenode cert info)"
        )
    session = _NoRedirects()
    trust(session, f"https://{settings.host}:{settings.port}/", settings.ca_file, settings.fingerprint, settings.verify)
    session.headers["accept"] = JsonSerializer().get_accept_types()
    if credential.token_name:
        session.auth = ProxmoxHTTPApiTokenAuth(
            credential.user,
            credential.token_name,
            credential.secret,
            verify_ssl=session.verify,
            timeout=settings.timeout_s,
        )
    else:
        try:
            session.auth = _PinnedTicketAuth(session, credential.user, credential.secret, base_url, settings.timeout_s)
        except requests.exceptions.RequestException as error:
            raise transport_error("POST /access/ticket", settings, error) from None
    root = ProxmoxResource(base_url=base_url, session=session, serializer=JsonSerializer())
    return Api(root, settings, credential)
