"""supervisord's own log records in the image's format.

Every program's lines carry its name (``platformd.common.logs``, logpipe);
supervisord's own records would be the odd ones out (``2026-... INFO
spawned: ...``, no name, never JSON). supervisord runs in our process, so we
replace its ``make_logger`` with one that writes to stdout through a handler
of ours: text ``<time> supervisord <LEVEL> <message>`` or one JSON object per
line. The logfile setting in the rendered configuration is ``/dev/null``.

Programs' output goes to ``stdout_logfile=/dev/stdout``. supervisord opens
that path anew, which fails with EACCES for a non-root user whenever this
process's stdout is a pipe or file created by someone else (the usual case
in a container running as uid 10001, or under a root shell). Those two names
are therefore mapped to the already-open streams of this process.
"""

from __future__ import annotations

import json
import sys
import time

from supervisor import loggers
from supervisor.options import ServerOptions


class _Handler(loggers.Handler):
    def __init__(self, fmt: str) -> None:
        super().__init__(sys.stdout)
        self._json = fmt == "json"

    def emit(self, record) -> None:  # supervisor's Handler API
        try:
            fields = record.asdict()
            message = str(fields.get("message", "")).rstrip("\n").replace("\n", "\\n")
            level = fields.get("levelname", "INFO")
            now = time.time()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int((now % 1) * 1000):03d}Z"
            if self._json:
                line = json.dumps({"time": stamp, "program": "supervisord", "level": level.lower(),
                                   "message": message}, sort_keys=True)
            else:
                line = f"{stamp} supervisord {level} {message}"
            self.stream.write(line + "\n")
            self.flush()
        except Exception:  # noqa: BLE001 - logging must never take supervisord down
            self.handleError()


def _inherit_std_streams() -> None:
    original = loggers.handle_file
    if getattr(original, "_platformd", False):
        return

    def handle_file(logger, filename, fmt, rotating=False, maxbytes=0, backups=0):
        stream = {"/dev/stdout": sys.stdout, "/dev/stderr": sys.stderr}.get(filename)
        if stream is None:
            return original(logger, filename, fmt, rotating=rotating, maxbytes=maxbytes, backups=backups)
        handler = loggers.StreamHandler(stream.buffer)  # bytes in, bytes out: children's output untouched
        handler.setFormat(fmt)
        handler.setLevel(logger.level)
        logger.addHandler(handler)

    handle_file._platformd = True  # type: ignore[attr-defined]
    loggers.handle_file = handle_file


def install(fmt: str) -> None:
    """Make every supervisord started in this process log in ``fmt``, and
    write programs' output to this process's own stdout/stderr."""
    _inherit_std_streams()

    def make_logger(self) -> None:
        self.logger = loggers.getLogger(self.loglevel)
        handler = _Handler(fmt)
        handler.setLevel(self.loglevel)
        self.logger.addHandler(handler)
        for msg in self.parse_criticals:
            self.logger.critical(msg)
        for msg in self.parse_warnings:
            self.logger.warn(msg)
        for msg in self.parse_infos:
            self.logger.info(msg)

    ServerOptions.make_logger = make_logger
