"""SGLang's log formats.

SGLang: `[YYYY-mm-dd HH:MM:SS TPn] msg` (`configure_logger`; the main process has no TP part;
SGLANG_LOG_MS=1 adds milliseconds), written to stderr by logging.basicConfig.
Uvicorn, as SGLang configures it: `[YYYY-mm-dd HH:MM:SS] INFO:     msg` for server lines (stderr)
and access lines `INFO:     127.0.0.1:40408 - "GET /health HTTP/1.1" 200 OK` (stdout).
"""

import logging
import sys

from sglang.sim import env

DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
UVICORN_ERROR = "uvicorn.error"
UVICORN_ACCESS = "uvicorn.access"


def _time_part() -> str:
    return "%(asctime)s.%(msecs)03d" if env.LOG_MS.get() else "%(asctime)s"


def configure_logger(log_level: str, prefix: str = "") -> None:
    """Root logging like SGLang's configure_logger, e.g. prefix " TP3" in scheduler 3."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format=f"[{_time_part()}{prefix}] %(message)s",
        datefmt=DATE_FORMAT,
        force=True,
    )


class _UvicornFormatter(logging.Formatter):
    """Uvicorn's "%(levelprefix)s": the level name and colon padded to 9 columns."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.levelprefix = f"{record.levelname}:".ljust(9)
        return super().formatMessage(record)


def configure_uvicorn_loggers(log_level: str) -> None:
    """Loggers for uvicorn-style server (stderr) and access (stdout) lines."""
    formatter = _UvicornFormatter(f"[{_time_part()}] %(levelprefix)s %(message)s", DATE_FORMAT)
    for name, stream in ((UVICORN_ERROR, sys.stderr), (UVICORN_ACCESS, sys.stdout)):
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(getattr(logging, log_level.upper()))
        logger.propagate = False
