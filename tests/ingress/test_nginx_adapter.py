"""The nginx adapter: its time limits (``NginxTimeouts``, with a stand-in
binary that hangs) and the error log's bound (real nginx)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from platformd.ingress.model import Configuration
from platformd.ingress.nginx import ConfigTestError, NginxFiles, NginxProcess, NginxTimeouts, StartError
from tests.helpers.waiting import wait_for


@pytest.fixture
def hanging_binary(tmp_path: Path) -> str:
    binary = tmp_path / "nginx"
    binary.write_text("#!/bin/sh\nexec sleep 30\n")
    binary.chmod(0o755)
    return str(binary)


def test_a_config_test_that_does_not_finish_is_a_config_test_error(tmp_path, hanging_binary):
    nginx = NginxProcess(NginxFiles(tmp_path / "state"), binary=hanging_binary, timeouts=NginxTimeouts(test=0.3))
    started = time.monotonic()
    with pytest.raises(ConfigTestError, match=r"did not finish within 0\.3s"):
        nginx.test_config(tmp_path / "nginx.conf")
    assert time.monotonic() - started < 5


def test_install_refuses_a_candidate_whose_test_times_out(tmp_path, hanging_binary):
    files = NginxFiles(tmp_path / "state")
    nginx = NginxProcess(files, binary=hanging_binary, timeouts=NginxTimeouts(test=0.3))
    with pytest.raises(ConfigTestError):
        nginx.install("events {}\n")
    assert not files.conf.exists() and not files.candidate.exists()


def test_start_waits_for_the_configured_time(tmp_path, hanging_binary):
    nginx = NginxProcess(NginxFiles(tmp_path / "state"), binary=hanging_binary, timeouts=NginxTimeouts(start=0.3))
    started = time.monotonic()
    try:
        with pytest.raises(StartError, match=r"within 0\.3s"):
            nginx.start()
        assert time.monotonic() - started < 5
    finally:
        nginx.stop(timeout=1)


def test_default_timeouts():
    assert NginxTimeouts() == NginxTimeouts(test=60.0, start=10.0, reload=10.0)


def test_the_error_log_is_rotated_past_its_limit_and_nginx_writes_a_new_one(dataplane):
    """#15: logs must not grow without bound in the state directory."""
    assert dataplane.apply(Configuration()).ok
    nginx = dataplane.nginx
    error_log = nginx.files.error_log
    with error_log.open("a") as out:
        out.write("x" * 4096 + "\n")
    assert not nginx.bound_error_log(limit=1 << 20)  # under the limit: left alone
    assert nginx.bound_error_log(limit=1024)
    rotated = error_log.with_name(error_log.name + ".1")
    assert rotated.stat().st_size > 4096
    # The master reopened its logs: a fresh, small file at the old path.
    wait_for(error_log.exists, 5, message="nginx reopened its error log")
    assert error_log.stat().st_size < 4096
