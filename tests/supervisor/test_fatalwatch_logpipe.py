"""The event listener protocol and the log tagger, as supervisord drives them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest

from platformd import logpipe
from tests.helpers.waiting import wait_for


def _event(name: str, processname: str) -> bytes:
    payload = f"processname:{processname} groupname:{processname} from_state:STARTING tries:0"
    header = f"ver:3.0 server:supervisor serial:1 pool:fatal-watch poolserial:1 eventname:{name} len:{len(payload)}\n"
    return (header + payload).encode()


def test_fatal_event_writes_marker_and_signals_parent(tmp_path):
    marker, starts = tmp_path / "fatal", tmp_path / "starts.json"
    # A parent shell stands in for supervisord: it records the SIGTERM it gets.
    script = (
        f"trap 'echo TERM > {tmp_path}/got; exit 0' TERM; "
        f"{sys.executable} -m platformd.fatalwatch --marker {marker} --starts {starts} <&0 & wait"
    )
    parent = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    parent.stdin.write(_event("PROCESS_STATE_STARTING", "nginx"))
    parent.stdin.write(_event("PROCESS_STATE_STARTING", "nginx"))
    parent.stdin.write(_event("PROCESS_STATE_FATAL", "ingress"))
    parent.stdin.flush()
    parent.wait(timeout=10)
    assert marker.read_text().splitlines() == ["ingress", "went FATAL"]
    assert json.loads(starts.read_text()) == {"nginx": 2}
    assert (tmp_path / "got").read_text().strip() == "TERM"


def test_tag_line_text_and_json():
    assert logpipe.tag_line("nginx", "stderr", "2026/01/01 [error] boom\n", "text") == "nginx stderr: 2026/01/01 [error] boom"
    record = json.loads(logpipe.tag_line("nginx", "stdout", 'GET / "quoted"\n', "json"))
    assert record["program"] == "nginx" and record["message"] == 'GET / "quoted"' and record["stream"] == "stdout"


def _inherit(how: str):
    """What logpipe inherits about SIGQUIT from whoever started it."""
    def preexec() -> None:
        if how == "ignored":                 # as under ``nohup ... &``
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        elif how == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGQUIT})
        else:
            signal.signal(signal.SIGQUIT, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGQUIT})
    return preexec


@pytest.mark.parametrize("inherited", ["default", "ignored", "blocked"])
def test_logpipe_forwards_signals_and_exit_status(tmp_path, inherited):
    ready = tmp_path / "ready"
    child = (
        f"trap 'echo got-quit; exit 7' QUIT; touch {ready}; "
        "while true; do sleep 0.05; done"
    )
    # Its own session, so that whatever happens everything it started is killed.
    proc = subprocess.Popen(
        [sys.executable, "-m", "platformd.logpipe", "--name", "demo", "--", "bash", "-c", child],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_inherit(inherited),
    )
    try:
        wait_for(ready.exists, timeout=10)
        proc.send_signal(signal.SIGQUIT)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 7
        assert "demo stdout: got-quit" in out
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_logpipe_reports_child_killed_by_signal_as_128_plus_signal():
    proc = subprocess.run(
        [sys.executable, "-m", "platformd.logpipe", "--name", "k", "--", "bash", "-c", "kill -9 $$"],
        capture_output=True, timeout=10,
    )
    assert proc.returncode == 128 + signal.SIGKILL
