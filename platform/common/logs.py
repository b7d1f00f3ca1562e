"""Process-wide logging set-up shared by every program in the image.

Under supervisord every program writes to the container's stdout/stderr, so
each record must be one line and carry the program's name; ``json`` gives one
JSON object per line for log collectors. The format comes from the command
line or ``PLATFORM_LOG_FORMAT`` (supervise passes it down).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

FORMATS = ("text", "json")


class _TextFormatter(logging.Formatter):
    def __init__(self, program: str) -> None:
        super().__init__()
        self._program = program

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        message = record.getMessage()
        if record.exc_info:
            message += " | " + self.formatException(record.exc_info)
        # One line per record, whatever the message holds.
        message = message.replace("\n", "\\n")
        return f"{stamp}.{int(record.msecs):03d}Z {self._program} {record.levelname} {record.name}: {message}"


class _JsonFormatter(logging.Formatter):
    def __init__(self, program: str) -> None:
        super().__init__()
        self._program = program

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "program": self._program,
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, sort_keys=True)


def formatter(program: str, fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return _JsonFormatter(program) if fmt == "json" else _TextFormatter(program)


class _RequestsAtDebug(logging.Filter):
    """httpx logs every request it sends at INFO ("HTTP Request: GET ..."). Our
    programs send many (health probes, Lua pushes, three per ``platformctl
    status``): they are DEBUG records here, shown only when DEBUG is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


_REQUESTS_AT_DEBUG = _RequestsAtDebug()


def setup(program: str, fmt: str | None = None, level: str | int | None = None) -> None:
    """Route the root logger to stderr, one line per record, tagged ``program``.

    httpx's per-request records become DEBUG (see ``_RequestsAtDebug``)."""
    fmt = fmt or os.environ.get("PLATFORM_LOG_FORMAT", "text")
    level = level or os.environ.get("PLATFORM_LOG_LEVEL", "INFO")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(program, fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    requests = logging.getLogger("httpx")
    requests.setLevel(logging.NOTSET)   # an earlier WARNING would hide them even at DEBUG
    if _REQUESTS_AT_DEBUG not in requests.filters:
        requests.addFilter(_REQUESTS_AT_DEBUG)
