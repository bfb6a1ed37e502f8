"""SGLang's HTTP endpoints on the stdlib's threaded HTTP server.

Looks like SGLang's FastAPI/uvicorn app from the outside: uvicorn access-log lines, FastAPI's
404/405 bodies, SGLang's API-key decision, Server-Sent Events with chunked transfer for streams.

The key, as sgl-project/sglang python/sglang/srt/utils/auth.py (commit 0ce3659c) has it:
add_api_key_middleware wraps the whole app in an ASGI middleware, so it decides before routing (an
unknown path or a wrong method without the key is 401, not 404/405); decide_request_auth lets
OPTIONS and paths starting /health, /ready or /metrics through, takes `Authorization: Bearer <key>`
(scheme case-insensitive) or `x-api-key: <key>`, compared with secrets.compare_digest; an
endpoint marked ADMIN_OPTIONAL (matched fully, method included) wants admin-api-key when one is set,
else api-key; every other endpoint wants api-key when one is set. Refused: 401 with the JSON body
{"error": "Unauthorized"}. python/sglang/srt/entrypoints/http_server.py adds the middleware at launch
when a key is set.

What SGLang's router (sglang-router 0.3.2, sgl-project/sglang sgl-model-gateway) calls on a worker,
all served here: GET /health (src/core/steps/worker/local/detect_connection.rs
try_http_health_check, and the health checker, --health-check-endpoint), GET /server_info and GET
/model_info (discover_metadata.rs get_server_info / get_model_info, with the worker's key as
Bearer), GET /get_load (the power_of_two policy's load monitor, src/core/worker_manager.rs
get_worker_load), POST /generate, /v1/completions, /v1/chat/completions (src/routers/http/router.rs
route_typed_request), GET /metrics (its /engine_metrics fan-out), POST /flush_cache (its
/flush_cache fan-out), and the proxied GETs /health_generate, /get_server_info, /get_model_info,
/v1/models (router.rs proxy_get_request). Seen with the real router against this simulator: only
/get_load was missing (a 404 in its access log) before it was added.
"""

import hmac
import json
import logging
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Iterator, NamedTuple, Tuple
from urllib.parse import urlsplit

from sglang.sim import api
from sglang.sim.logs import UVICORN_ACCESS
from sglang.sim.metrics import render_metrics
from sglang.sim.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)
access_logger = logging.getLogger(UVICORN_ACCESS)

AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics")  # k8s probes and Prometheus, never a key
# Endpoints SGLang marks @auth_level(AuthLevel.ADMIN_OPTIONAL) (guess for /flush_cache: an admin action).
ADMIN_OPTIONAL = ("/flush_cache",)
FLUSH_CACHE_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class Reply(NamedTuple):
    """A complete response: status, content type, body."""

    status: int
    content_type: str
    body: bytes


def _json(obj, status: int = 200) -> Reply:
    return Reply(status, "application/json", json.dumps(obj, separators=(",", ":")).encode())


def _deprecated(old: str, new: str) -> None:
    logger.warning(
        f"Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead."
    )


def _health(tm: TokenizerManager, path: str, body) -> Reply:
    return Reply(tm.health_check(path), "text/plain", b"")


def _model_info(tm: TokenizerManager, path: str, body) -> Reply:
    if path == "/get_model_info":
        _deprecated(path, "/model_info")
    return _json(api.model_info(tm))


def _server_info(tm: TokenizerManager, path: str, body) -> Reply:
    if path == "/get_server_info":
        _deprecated(path, "/server_info")
    return _json(api.server_info(tm))


def _metrics(tm: TokenizerManager, path: str, body) -> Reply:
    if not tm.args.enable_metrics:
        return _json({"detail": "Not Found"}, 404)
    return Reply(200, "text/plain; version=0.0.4; charset=utf-8", render_metrics(tm).encode())


def _get_load(tm: TokenizerManager, path: str, body) -> Reply:
    """SGLang's deprecated /get_load shim over /v1/loads (http_server.py get_load at the pinned
    commit): one entry per DP rank (one here), num_reqs = running + waiting requests."""
    _deprecated(path, "/v1/loads")
    total = int(tm.scheduler_info["max_total_num_tokens"])
    used = int(total * float(tm.chans.stat("token_usage")))
    load = {
        "dp_rank": 0,
        "num_reqs": len(tm.inflight_rids()),
        "num_waiting_reqs": 0,
        "num_tokens": total,
        "num_pending_tokens": total - used,
        "ts_tic": time.perf_counter(),
    }
    return _json([load])


def _flush_cache(tm: TokenizerManager, path: str, body) -> Reply:
    return Reply(200, "text/plain", FLUSH_CACHE_TEXT.encode())


Handler = Callable[[TokenizerManager, str, object], object]
ROUTES: Dict[str, Tuple[Tuple[str, ...], Handler]] = {
    "/health": (("GET",), _health),
    "/health_generate": (("GET",), _health),
    "/model_info": (("GET",), _model_info),
    "/get_model_info": (("GET",), _model_info),
    "/server_info": (("GET",), _server_info),
    "/get_server_info": (("GET",), _server_info),
    "/v1/models": (("GET",), lambda tm, path, body: _json(api.list_models(tm))),
    "/metrics": (("GET",), _metrics),
    "/get_load": (("GET",), _get_load),
    "/flush_cache": (("GET", "POST"), _flush_cache),
    "/generate": (("POST",), lambda tm, path, body: api.generate(tm, body)),
    "/v1/completions": (("POST",), lambda tm, path, body: api.openai_completion(tm, body, chat=False)),
    "/v1/chat/completions": (("POST",), lambda tm, path, body: api.openai_completion(tm, body, chat=True)),
}


class RequestHandler(BaseHTTPRequestHandler):
    """Routes one connection's requests to the API."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: "SimHTTPServer"

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        route = ROUTES.get(path)
        body = self._read_body()
        if not self._authorized(path, route):  # SGLang's middleware runs before routing
            return self._send(_json({"error": "Unauthorized"}, 401))
        if route is None:
            return self._send(_json({"detail": "Not Found"}, 404))
        methods, handler = route
        if self.command not in methods:
            return self._send(_json({"detail": "Method Not Allowed"}, 405))
        if self.command == "POST" and path != "/flush_cache":
            try:
                body = json.loads(body or b"{}")
            except ValueError as e:
                return self._send(_json({"detail": f"JSON decode error: {e}"}, 422))
        try:
            result = handler(self.server.tm, path, body)
        except api.ApiError as e:
            return self._send(self._error_reply(path, e))
        except Exception:
            logger.error(f"Error in request {path}: {traceback.format_exc()}")
            return self._send(_json({"detail": "Internal Server Error"}, 500))
        if isinstance(result, Reply):
            return self._send(result)
        if isinstance(result, (dict, list)):
            return self._send(_json(result))
        self._send_stream(result)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authorized(self, path: str, route) -> bool:
        args = self.server.tm.args
        if self.command == "OPTIONS" or path.startswith(AUTH_EXEMPT_PREFIXES):
            return True
        # the route's auth level counts only on a full match (starlette Match.FULL: method too)
        admin_optional = path in ADMIN_OPTIONAL and route is not None and self.command in route[0]
        wanted = (args.admin_api_key or args.api_key) if admin_optional else args.api_key
        return not wanted or self._presents(wanted)

    def _presents(self, key: str) -> bool:
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        offered = [token] if scheme.lower() == "bearer" else []
        offered += [self.headers.get("x-api-key")] if self.headers.get("x-api-key") else []
        return any(hmac.compare_digest(t.encode(), key.encode()) for t in offered)

    @staticmethod
    def _error_reply(path: str, error: api.ApiError) -> Reply:
        if path.startswith("/v1/"):
            return _json(
                {
                    "object": "error",
                    "message": str(error),
                    "type": "BadRequestError",
                    "param": None,
                    "code": error.status,
                },
                error.status,
            )
        return _json({"error": {"message": str(error)}}, error.status)

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        self.send_header("content-length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def _send_stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_request(self, code="-", size="-") -> None:
        """Uvicorn's access line, written when the response starts."""
        code = int(code)
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        access_logger.info(
            f'{client} - "{self.command} {self.path} {self.request_version}" {code} {HTTPStatus(code).phrase}'
        )

    def log_message(self, format, *args) -> None:
        """Silence http.server's own stderr lines (uvicorn's format is used instead)."""


class SimHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server bound to the TokenizerManager."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: Tuple[str, int], tm: TokenizerManager):
        super().__init__(address, RequestHandler)
        self.tm = tm


class _DummyHandler(BaseHTTPRequestHandler):
    """SGLang's launch_dummy_health_check_server (python/sglang/srt/utils/common.py, commit
    001067ff): GET /ping, /health and /health_generate answer 200 with an empty body, whatever
    the schedulers do; /metrics exists with --enable-metrics (its prometheus middleware; here
    an empty exposition, a guess); uvicorn runs at level warning, so no access lines."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: "DummyHealthServer"

    def _known(self) -> bool:
        path = urlsplit(self.path).path
        return path in ("/ping", "/health", "/health_generate") or (path == "/metrics" and self.server.metrics)

    def do_GET(self):
        if self._known():
            self._send(Reply(200, "text/plain; charset=utf-8", b""))
        else:
            self._send(_json({"detail": "Not Found"}, 404))

    def do_POST(self):
        known = self._known()
        self._send(_json({"detail": "Method Not Allowed"}, 405) if known else _json({"detail": "Not Found"}, 404))

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        self.send_header("content-length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format, *args) -> None:
        """uvicorn at log level warning: no access lines."""


class DummyHealthServer(ThreadingHTTPServer):
    """The health server of a node above rank 0 (engine.py)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: Tuple[str, int], metrics: bool):
        super().__init__(address, _DummyHandler)
        self.metrics = metrics
