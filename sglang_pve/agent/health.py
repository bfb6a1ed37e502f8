"""HTTP probes of the server's own endpoints (no proxies, bounded by a timeout).

/health and /health_generate answer 503 until warmup finished and whenever the detokenizer did
not answer a 1-token generation within SGLANG_HEALTH_CHECK_TIMEOUT (20 s); SGLang's API-key
check does not apply to them.

    get("127.0.0.1", 8000, "/health", timeout=5) -> Result(status=200, error=None, seconds=0.012)
"""

import http.client
import socket
import time
from dataclasses import dataclass

from sglang_pve.agent import contract


@dataclass(frozen=True)
class Result:
    status: int | None  # HTTP status, None when no answer came
    error: str | None  # why no answer / not 200
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        return f"HTTP {self.status}" if self.status is not None else (self.error or "no answer")


def get(host: str, port: int, path: str, timeout: float) -> Result:
    started = time.monotonic()
    connection = http.client.HTTPConnection(contract.probe_address(host), port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"User-Agent": "sglang-pve-agent"})
        response = connection.getresponse()
        response.read(65536)
        error = None if response.status == 200 else f"HTTP {response.status}"
        return Result(response.status, error, time.monotonic() - started)
    except socket.timeout:
        return Result(None, f"no answer within {timeout:g}s", time.monotonic() - started)
    except (OSError, http.client.HTTPException) as error:
        return Result(None, str(error) or type(error).__name__, time.monotonic() - started)
    finally:
        connection.close()


def listening(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((contract.probe_address(host), port), timeout=timeout):
            return True
    except OSError:
        return False
