"""supervisord's logging as installed by platformd.supervisorlog."""

from __future__ import annotations

import sys

from supervisor import loggers

from platformd import supervisorlog


def test_programs_output_goes_to_our_open_streams_not_a_reopened_dev_stdout(tmp_path):
    # Reopening /dev/stdout fails with EACCES for a non-root user when stdout
    # belongs to someone else (a container runtime's pipe): no path is opened.
    supervisorlog.install("text")
    logger = loggers.getLogger(loggers.LevelsByName.INFO)
    loggers.handle_file(logger, "/dev/stdout", "%(message)s")
    loggers.handle_file(logger, "/dev/stderr", "%(message)s")
    loggers.handle_file(logger, str(tmp_path / "f.log"), "%(message)s")
    streams = [h.stream for h in logger.handlers]
    assert streams[0] is sys.stdout.buffer and streams[1] is sys.stderr.buffer
    assert isinstance(logger.handlers[2], loggers.FileHandler)


def test_supervisord_records_are_tagged_text_and_json(capsys):
    for fmt in ("text", "json"):
        handler = supervisorlog._Handler(fmt)
        handler.stream = sys.stdout
        record = loggers.LogRecord(loggers.LevelsByName.INFO, "spawned: 'nginx' with pid 1\n", exc_info=None)
        handler.emit(record)
    text, js = capsys.readouterr().out.splitlines()
    assert " supervisord INFO spawned: 'nginx' with pid 1" in text
    import json

    assert json.loads(js)["program"] == "supervisord" and json.loads(js)["message"] == "spawned: 'nginx' with pid 1"
