"""The request log: one JSON line per request (time, method, path, user, parameters with
secrets masked, status, the schema's verdict), for tests to assert that every call a client
made passed the real schema.

    from lab.pve import requestlog
    assert requestlog.schema_violations(requestlog.read(path)) == []
"""

import json
import threading
import time

MASK = "********"
SECRET_PARAMS = {"password", "otp", "tfa-challenge", "new-password"}


def mask(params: dict, secrets: list[str]) -> dict:
    """Secret parameters and any value containing a known secret, replaced by MASK."""
    out = {}
    for key, value in params.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if key in SECRET_PARAMS or any(s and s in text for s in secrets):
            out[key] = MASK
        else:
            out[key] = value
    return out


class RequestLog:
    def __init__(self, path, secrets: list[str]):
        self.path = path
        self.secrets = secrets
        self._lock = threading.Lock()

    def write(
        self,
        method: str,
        path: str,
        user: str | None,
        params: dict,
        status: int,
        message: str | None = None,
        schema_errors: dict | None = None,
    ) -> None:
        if not self.path:
            return
        entry = {
            "time": round(time.time(), 3),
            "method": method,
            "path": path,
            "user": user,
            "params": mask(params, self.secrets),
            "status": status,
            "schema_ok": not schema_errors,
        }
        if schema_errors:
            entry["schema_errors"] = schema_errors
        if message and (status >= 400 or status == 0):
            entry["message"] = message
        line = json.dumps(entry, sort_keys=True)
        for secret in self.secrets:  # belt and braces: no secret in any field
            line = line.replace(secret, MASK)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read(path) -> list[dict]:
    """Every entry of a request log file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def schema_violations(entries: list[dict]) -> list[dict]:
    """The entries whose request the schema refused (unknown path/method or bad parameters)."""
    return [e for e in entries if not e["schema_ok"]]
