"""Process adapter for one nginx master: start, test, swap, reload, stop.

This is the only module that runs the nginx binary or signals its processes.
It knows nothing about the model; it deals in files and pids.

Guarantees:

* ``install`` replaces the live configuration file atomically (``os.replace``
  of a candidate in the same directory), so nginx never reads half a file.
* ``reload`` returns only once nginx runs workers that were not there before
  the SIGHUP and every previous worker is shutting down; otherwise it raises
  ``ReloadError`` (nginx keeps running the old configuration in that case).
* ``start`` clears what a crashed master leaves behind (orphaned workers
  still holding the listening sockets, the stale unix socket file) first.

Worker processes are told apart by their process title ("nginx: worker
process", "... is shutting down") read from /proc, which is how nginx itself
reports the state of a worker.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from platformd.common.clock import REAL_CLOCK, Clock
from platformd.ingress import procfs
from platformd.ingress.layout import NginxFiles  # re-exported: callers import it from here

__all__ = ["ConfigTestError", "NginxError", "NginxFiles", "NginxProcess", "NginxTimeouts", "ReloadError", "StartError"]

NGINX_BINARY = "/usr/sbin/nginx"


class NginxError(Exception):
    """Base class of everything this adapter raises."""


class ConfigTestError(NginxError):
    """``nginx -t`` refused a configuration; ``output`` holds what it said."""

    def __init__(self, output: str) -> None:
        super().__init__(f"nginx -t failed: {output.strip()}")
        self.output = output


class ReloadError(NginxError):
    """The master did not replace its workers after SIGHUP."""


class StartError(NginxError):
    """The master did not come up (or died right away)."""


@dataclass(frozen=True)
class NginxTimeouts:
    """How long, in seconds, each verb waits for nginx before it gives up.

    Each of the three parses the whole configuration, so the time grows with
    it: about 1.1 s per 1,000 Ingresses of two paths for ``nginx -t`` on an
    idle core, twice that for a start or reload (bench/bench_ingress.py), and
    several times that on a busy node. The defaults
    suit tests and small sites; the controller passes its own
    (``main.NGINX_TIMEOUTS``). Giving up early is the worse failure: a
    configuration nginx would have accepted is reported as refused, and a
    start that was merely slow leaves every host unserved.
    """

    test: float = 60.0  # ``nginx -t``; past it, ConfigTestError
    start: float = 10.0  # until the first workers run; past it, StartError
    reload: float = 10.0  # until new workers replaced the old ones; past it, ReloadError


def _ppid(pid: int) -> int | None:
    fields = procfs.stat_fields(pid)
    if fields is None or fields[0] == "Z":  # a zombie is gone for our purposes
        return None
    return int(fields[1])


def _children(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _ppid(int(entry)) == pid:
            children.append(int(entry))
    return children


def _alive(pid: int) -> bool:
    return _ppid(pid) is not None


class NginxProcess:
    """One nginx master, started either in the foreground (``daemon off``,
    a child of this process, as under supervisord or in tests) or as a
    daemon (found through its pid file)."""

    def __init__(
        self,
        files: NginxFiles,
        binary: str = NGINX_BINARY,
        clock: Clock = REAL_CLOCK,
        foreground: bool = True,
        timeouts: NginxTimeouts = NginxTimeouts(),
    ) -> None:
        self.files = files
        self.binary = binary
        self.clock = clock
        self.foreground = foreground
        self.timeouts = timeouts
        self._popen: subprocess.Popen | None = None
        self._known_workers: set[int] = set()

    # --- queries --------------------------------------------------------

    def master_pid(self) -> int | None:
        """The pid of the running master, or None when nginx is not running."""
        if self._popen is not None:
            if self._popen.poll() is None:
                return self._popen.pid
            self._popen = None
        try:
            pid = int(self.files.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) and procfs.title(pid).startswith("nginx: master") else None

    def worker_pids(self, *, shutting_down: bool = False) -> set[int]:
        """Workers of the current master; with ``shutting_down`` the old ones."""
        master = self.master_pid()
        if master is None:
            return set()
        wanted = "nginx: worker process is shutting down" if shutting_down else "nginx: worker process"
        return {pid for pid in _children(master) if procfs.title(pid) == wanted}

    def _settled_workers(self, master: int) -> set[int] | None:
        """The serving workers of ``master``, or None while one was just forked.

        A freshly forked child still carries the master's title until it has
        set itself up, so counting before that would miss workers.
        """
        children = _children(master)
        titles = [procfs.title(pid) for pid in children]
        if any(title.startswith("nginx: master") for title in titles):
            return None
        workers = {pid for pid, title in zip(children, titles) if title == "nginx: worker process"}
        return workers if len(workers) >= self._expected_workers() else None

    def _expected_workers(self) -> int:
        """``worker_processes`` of the live file (``auto``: one per CPU, as nginx counts)."""
        try:
            match = re.search(r"^\s*worker_processes\s+(\w+);", self.files.conf.read_text(), flags=re.M)
        except OSError:
            return 1
        if match is None:
            return 1
        value = match.group(1)
        return int(value) if value.isdigit() else (os.cpu_count() or 1)

    # --- verbs ----------------------------------------------------------

    def test_config(self, path: Path | None = None) -> None:
        """Run ``nginx -t`` on ``path`` (default: the live file).

        Raises ``ConfigTestError`` when nginx refuses it or does not answer
        within ``timeouts.test`` (then the test is killed).
        """
        conf = path or self.files.conf
        try:
            result = subprocess.run(
                [self.binary, "-t", "-q", "-p", str(self.files.state_dir), "-c", str(conf), "-e", str(self.files.error_log)],
                capture_output=True,
                text=True,
                timeout=self.timeouts.test,
            )
        except subprocess.TimeoutExpired:
            raise ConfigTestError(f"nginx -t did not finish within {self.timeouts.test:g}s") from None
        if result.returncode != 0:
            raise ConfigTestError(result.stderr or result.stdout)

    def install(self, text: str) -> None:
        """Make ``text`` the live configuration: write a candidate, test it, swap it in.

        Raises ``ConfigTestError`` and leaves the live file untouched when
        nginx refuses the candidate.
        """
        self.files.prepare()  # nginx -t wants the temp and log directories
        candidate = self.files.candidate
        candidate.write_text(text)
        try:
            self.test_config(candidate)
        except NginxError:
            candidate.unlink(missing_ok=True)
            raise
        os.replace(candidate, self.files.conf)

    def start(self, timeout: float | None = None) -> int:
        """Start the master on the live configuration; returns its pid once workers run.

        Waits ``timeout`` seconds (default ``timeouts.start``), then raises ``StartError``.
        """
        timeout = self.timeouts.start if timeout is None else timeout
        if self.master_pid() is not None:
            raise StartError("nginx is already running")
        self.files.prepare()
        self._clear_leftovers()
        args = [self.binary, "-p", str(self.files.state_dir), "-c", str(self.files.conf), "-e", str(self.files.error_log)]
        if self.foreground:
            self._popen = subprocess.Popen(
                # stdout inherited: the access log goes there (view.py).
                [*args, "-g", "daemon off;"], stdin=subprocess.DEVNULL, stdout=None,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )
        else:
            try:
                result = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise StartError(f"nginx did not daemonize within {timeout:g}s") from None
            if result.returncode != 0:
                raise StartError(f"nginx failed to start: {result.stderr.strip()}")
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            if self._popen is not None and self._popen.poll() is not None:
                self._popen = None
                raise StartError(f"nginx exited at start-up; see {self.files.error_log}: {self._log_tail()}")
            master = self.master_pid()
            workers = self._settled_workers(master) if master is not None else None
            if workers:
                self._known_workers = workers
                return master
            self.clock.sleep(0.01)
        raise StartError(f"nginx did not start within {timeout}s: {self._log_tail()}")

    def reload(self, timeout: float | None = None) -> set[int]:
        """SIGHUP the master and wait until new workers replace the old ones.

        Waits ``timeout`` seconds (default ``timeouts.reload``).

        Returns the new worker pids. nginx re-reads the file itself; when it
        cannot apply it (e.g. a port it cannot bind) it logs the error and
        keeps the old workers, which we detect and report as ``ReloadError``.
        """
        master = self.master_pid()
        if master is None:
            raise ReloadError("nginx is not running")
        timeout = self.timeouts.reload if timeout is None else timeout
        before = self.worker_pids()
        os.kill(master, signal.SIGHUP)
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            current = self._settled_workers(master)
            if current and not (current & before):
                self._known_workers = current
                return current
            if self.master_pid() != master:
                raise ReloadError("nginx master exited during reload")
            self.clock.sleep(0.005)
        raise ReloadError(f"nginx did not replace its workers within {timeout}s: {self._log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop (SIGQUIT), then SIGKILL for the master and its workers."""
        master = self.master_pid()
        if master is None:
            self._clear_leftovers()
            return
        workers = set(_children(master))
        os.kill(master, signal.SIGQUIT)
        if not self._wait_gone({master}, timeout):
            for pid in {master, *workers}:
                _kill(pid, signal.SIGKILL)
        if self._popen is not None:
            self._popen.wait(timeout=5)
            self._popen = None
        self._clear_leftovers()

    def kill_master(self) -> int:
        """SIGKILL the master only, as a crash would (for tests and chaos)."""
        master = self.master_pid()
        if master is None:
            raise NginxError("nginx is not running")
        self._known_workers |= self.worker_pids()
        os.kill(master, signal.SIGKILL)
        if self._popen is not None:
            self._popen.wait(timeout=5)
            self._popen = None
        return master

    def bound_error_log(self, limit: int) -> bool:
        """Keep the error log near ``limit`` bytes; True if it was rotated.

        The access log goes to stdout; the error log stays a file because
        start-up failures are read back from it (``_log_tail``). Past ``limit``
        it becomes ``error.log.1`` (replacing the previous one) and the master
        reopens its logs (SIGUSR1, which it passes on to the workers), so at
        most about twice ``limit`` stays in the state directory.
        """
        log_file = self.files.error_log
        try:
            size = log_file.stat().st_size
        except OSError:
            return False
        master = self.master_pid()
        if size <= limit or master is None:
            return False
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
        _kill(master, signal.SIGUSR1)
        return True

    # --- internals ------------------------------------------------------

    def _clear_leftovers(self) -> None:
        """Workers orphaned by a crashed master keep the listening sockets
        (and serve with stale state); ask them to quit, then insist."""
        orphans = {pid for pid in self._known_workers if procfs.title(pid).startswith("nginx: worker process")}
        for pid in orphans:
            _kill(pid, signal.SIGQUIT)
        if orphans and not self._wait_gone(orphans, 2.0):
            for pid in orphans:
                _kill(pid, signal.SIGKILL)
            self._wait_gone(orphans, 2.0)
        self._known_workers = set()
        # nginx removes its unix socket on a clean exit only; a stale one
        # would make bind() fail with "Address already in use".
        self.files.socket.unlink(missing_ok=True)

    def _wait_gone(self, pids: set[int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(_alive(pid) for pid in pids):
                return True
            time.sleep(0.01)
        return False

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = self.files.error_log.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def ensure_default_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed fallback certificate in ``directory`` (made once with openssl).

    nginx needs *some* certificate on the https listener; Lua replaces it per
    SNI name, and unknown names get this one (like ingress-nginx's "Fake
    Certificate").
    """
    cert, key = directory / "default.crt", directory / "default.key"
    if cert.exists() and key.exists():
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "3650", "-subj", "/CN=platform-default-certificate",
         "-addext", "subjectAltName=DNS:platform-default-certificate"],
        capture_output=True, text=True, timeout=60,
    )
    if result.returncode != 0:
        raise NginxError(f"openssl could not create the default certificate: {result.stderr.strip()}")
    key.chmod(0o600)
    return cert, key
