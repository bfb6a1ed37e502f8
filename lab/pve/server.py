"""The HTTPS API server on port 8006 (pveproxy's part): ``/api2/json`` paths, PVE's
authentication, the schema's verdict on every request, the handlers, the request log and fault
injection. Responses are ``{"data": ...}``; errors carry PVE's status code, the message as the
status line's reason phrase and ``{"data": null}`` (plus ``"errors"`` for parameters).
"""

import hashlib
import json
import socket
import ssl
import threading
import time
import traceback
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from . import routes
from .auth import Authenticator, secret_values
from .errors import ApiError, not_implemented, param_error, perm_error
from .faults import Faults
from .node import Node, Request
from .requestlog import RequestLog
from .validate import verify

PREFIX = "/api2/json"
NO_AUTH = {("POST", "/access/ticket"), ("GET", "/access/ticket"), ("GET", "/access/domains")}


def fingerprint(certfile) -> str:
    """A PEM certificate's SHA-256 as `pvenode cert info` and /nodes' ssl_fingerprint print it."""
    with open(certfile, encoding="ascii") as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def decode_params(query: str, body: bytes, content_type: str | None) -> dict:
    """extract_params: the body (form or JSON) for POST/PUT, then the query on top. Repeated
    form keys are joined with NUL like PVE's decode_urlencoded."""
    params: dict = {}
    if body:
        if content_type and content_type.split(";")[0].strip() == "application/json":
            decoded = json.loads(body.decode("utf-8"))
            if not isinstance(decoded, dict):
                raise ApiError("JSON body must be an object", 400)
            for key, value in decoded.items():
                # JSON numbers are Perl scalars: their decimal text
                params[key] = (
                    value if isinstance(value, (str, bool, list, dict)) or value is None else json.dumps(value)
                )
        else:
            _merge(params, parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    _merge(params, parse_qsl(query, keep_blank_values=True))
    return {k: v for k, v in params.items() if v is not None}


def _merge(params: dict, pairs) -> None:
    seen = set()
    for key, value in pairs:
        params[key] = f"{params[key]}\0{value}" if key in seen else value
        seen.add(key)


def check_permissions(info: dict, ident, path_params: dict) -> None:
    """The schema's `permissions.check` for users without every privilege (auth.py)."""
    if ident.privileged:
        return
    check = (info.get("permissions") or {}).get("check")
    if isinstance(check, list) and check and check[0] == "perm":
        path = check[1]
        for key, value in path_params.items():
            path = path.replace("{" + key + "}", str(value))
        privs = check[2] if len(check) > 2 else []
        raise perm_error(f"{path}, {privs[0] if privs else ''}".rstrip(", "))


class Emulator:
    """One node's API: ``Emulator(node, schema, credentials).handle(method, path, ...)`` is the
    whole request pipeline; `serve` puts it behind HTTPS."""

    def __init__(self, node: Node, schema, credentials: dict, request_log=None, faults_file=None):
        self.node = node
        self.schema = schema
        self.auth = Authenticator(credentials)
        self.log = RequestLog(request_log, secret_values(credentials))
        self.faults = Faults(faults_file)

    def handle(
        self,
        method: str,
        rel_path: str,
        params: dict,
        cookie: str | None,
        csrf: str | None,
        authorization: str | None,
        fault: dict | None = None,
    ):
        """-> (status, reason, body dict, user); logs the request."""
        user, schema_errors = None, None
        try:
            if (method, rel_path) in NO_AUTH:
                ident = None
            else:
                ident = self.auth.authenticate(method, cookie, csrf, authorization)
                user = ident.user
            found = self.schema.find(method, rel_path)
            if found is None or found[1] is None:
                schema_errors = {"_path": f"no {method} {rel_path} in the PVE {self.schema.version} schema"}
                raise not_implemented(method, rel_path)
            route, info, path_params = found
            values = {**params, **path_params}
            errors = verify(info.get("parameters", {}), values)
            if errors:
                schema_errors = errors
                raise param_error(errors)
            if (method, rel_path) == ("POST", "/access/ticket"):
                data = self.auth.login(
                    values["username"],
                    values["password"],
                    values.get("realm"),
                    values.get("otp"),
                    values.get("tfa-challenge"),
                )
                user = data["username"]
            else:
                if ident is not None:
                    check_permissions(info, ident, path_params)
                handler = routes.handler(method, route.template)
                if handler is None:
                    raise not_implemented(method, rel_path)
                if fault and "http_status" in fault:
                    raise ApiError(fault.get("message", "injected fault"), int(fault["http_status"]))
                req = Request(ident, values, info, (fault or {}).get("task_error"))
                data = handler(self.node, req)
            status, reason, body = 200, "OK", {"data": data}
            if isinstance(data, routes.WithTotal):
                body = {"data": data.data, **({"total": data.total} if data.total else {})}
        except ApiError as e:
            status, reason = e.status, e.message.split("\n")[0]
            body = {"data": None}
            if e.errors:
                body["errors"] = e.errors
        except Exception as e:  # a bug or a backend error outside a task: PVE's die -> 500
            traceback.print_exc()
            status, reason, body = 500, (str(e) or type(e).__name__).split("\n")[0], {"data": None}
        self.log.write(method, rel_path, user, params, status, reason, schema_errors)
        return status, reason, body, user

    # -- HTTPS --------------------------------------------------------------------------------
    def make_server(self, host: str, port: int, certfile, keyfile) -> ThreadingHTTPServer:
        handler = type("Handler", (_Handler,), {"emulator": self})
        server = ThreadingHTTPServer((host, port), handler)
        server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        self.node.ssl_fingerprint = fingerprint(certfile)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        return server

    def serve_in_thread(self, host, port, certfile, keyfile) -> ThreadingHTTPServer:
        """Start serving in a daemon thread (tests); stop with ``server.shutdown()``."""
        server = self.make_server(host, port, certfile, keyfile)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    emulator: Emulator

    def log_message(self, fmt, *args):  # the request log is the record; keep stderr quiet
        pass

    def _dispatch(self):
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if not url.path.startswith(PREFIX + "/") and url.path != PREFIX:
            return self._send(501, "no such uri", {"data": None})
        rel_path = url.path[len(PREFIX) :] or "/"
        fault = self.emulator.faults.match(self.command, rel_path)
        if fault and fault.get("delay_s"):
            time.sleep(float(fault["delay_s"]))
        if fault and fault.get("drop"):
            self.emulator.log.write(self.command, rel_path, None, {}, 0, "connection dropped (fault injection)")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            params = decode_params(url.query, body, self.headers.get("Content-Type"))
        except (ValueError, ApiError) as e:
            reason = str(e).split("\n")[0]
            self.emulator.log.write(self.command, rel_path, None, {}, 400, reason, {"_body": reason})
            return self._send(400, reason, {"data": None})
        cookie = None
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == "PVEAuthCookie":
                cookie = value
        status, reason, payload, _ = self.emulator.handle(
            self.command,
            rel_path,
            params,
            cookie,
            self.headers.get("CSRFPreventionToken"),
            self.headers.get("Authorization"),
            fault,
        )
        self._send(status, reason, payload)

    def _send(self, status: int, reason: str, payload: dict):
        raw = json.dumps(payload).encode()
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        self.send_header("Expires", formatdate(usegmt=True))
        if status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch
