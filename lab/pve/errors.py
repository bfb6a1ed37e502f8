"""The errors PVE's API answers with (PVE::Exception): the HTTP status, the message that becomes
the status line's reason phrase, and for parameter errors the per-parameter dict of the body."""


class ApiError(Exception):
    """A plain `die "msg\\n"` in a handler: HTTP 500 with the message; or any status given."""

    def __init__(self, message: str, status: int = 500, errors: dict | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = errors


def param_error(errors: dict) -> ApiError:
    """raise_param_exc: 400 "Parameter verification failed." with {"errors": {...}}."""
    return ApiError("Parameter verification failed.", 400, errors)


def perm_error(what: str | None = None) -> ApiError:
    """raise_perm_exc: 403 "Permission check failed (what)"."""
    return ApiError("Permission check failed" + (f" ({what})" if what else ""), 403)


def not_implemented(method: str, path: str) -> ApiError:
    return ApiError(f"Method '{method} {path}' not implemented", 501)
