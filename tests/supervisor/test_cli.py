"""The command lines: `platformd` help and errors, `platformctl` with no flags, log levels."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from platformd import localrun


def _run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_unknown_argument_without_a_role_is_named():
    proc = _run("platformd.cli", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("platformd: unrecognised argument --bogus")
    proc = _run("platformd.cli", "bogus")
    assert proc.returncode == 2 and "unknown subcommand 'bogus'" in proc.stderr


@pytest.mark.parametrize("role, flags", [
    ("ingress", ["--kubeconfig", "--source", "--http-port", "--https-port", "--publish-service"]),
    ("nodeproxy", ["--kubeconfig", "--healthz-bind-address", "--scheduler"]),
    ("all", ["--source", "--http-port", "--healthz-bind-address"]),
])
def test_role_help_lists_the_programs_flags(role, flags):
    proc = _run("platformd.cli", "--role", role, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--state-dir" in proc.stdout and "--health-port" in proc.stdout   # the supervisor's own
    for flag in flags:
        assert flag in proc.stdout, flag
    assert "--external-nginx" not in proc.stdout.split("set by platformd")[0]  # not for users to give


def test_help_without_a_role_says_how_to_see_the_programs_flags():
    proc = _run("platformd.cli", "--help")
    assert proc.returncode == 0
    assert "--role ingress|nodeproxy|all --help" in proc.stdout


def test_platformctl_with_nothing_running_names_the_fix(tmp_path):
    env = {"PLATFORM_POINTER": str(tmp_path / "ptr" / "current.json")}
    for command in ("backends", "conf"):
        proc = _run("platformd.ctl", command, env={**env, "XDG_RUNTIME_DIR": str(tmp_path / "xdg")})
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1
        assert "no local platformd recorded in" in proc.stderr and "make demo" in proc.stderr
        assert "--state-dir" in proc.stderr


def test_a_pointer_is_found_while_its_process_lives(tmp_path):
    path = tmp_path / "ptr" / "current.json"
    pointer = localrun.Pointer(pid=os.getpid(), role="ingress", health_url="http://127.0.0.1:1", state_dir="/x")
    assert localrun.write(pointer, path) == path
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert localrun.read(path) == pointer
    # Stale: its process is gone.
    dead = subprocess.Popen(["true"])
    dead.wait()
    localrun.write(localrun.Pointer(dead.pid, "ingress", None, "/y"), path)
    assert localrun.read(path) is None
    # Only the run that wrote it removes it.
    localrun.write(pointer, path)
    localrun.remove(pointer.pid + 1, path)
    assert path.exists()
    localrun.remove(pointer.pid, path)
    assert not path.exists()


def test_a_pointer_in_a_directory_others_may_write_is_ignored(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    path = shared / "current.json"
    path.write_text('{"pid": %d, "role": "ingress", "health_url": null, "state_dir": "/evil"}' % os.getpid())
    assert localrun.read(path) is None
    assert localrun.write(localrun.Pointer(os.getpid(), "ingress", None, "/x"), path) is None


def test_http_client_request_records_are_debug(tmp_path):
    code = ("import logging; from platformd.common import logs; logs.setup('health'); "
            "logging.getLogger('httpx').info('HTTP Request: GET http://x/status'); "
            "logging.getLogger('httpx').warning('kept')")
    info = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PLATFORM_LOG_LEVEL": "INFO"})
    assert "HTTP Request" not in info.stderr and "WARNING httpx: kept" in info.stderr
    debug = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PLATFORM_LOG_LEVEL": "DEBUG"})
    assert "DEBUG httpx: HTTP Request: GET http://x/status" in debug.stderr
