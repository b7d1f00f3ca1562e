"""Fixtures for data-plane tests against a real nginx with the real Lua.

Usage::

    from platformd.ingress.model import Backend, Configuration, Location, Server

    def test_something(dataplane, backends):
        b0, b1 = backends(2)                      # real HTTP servers answering "b0", "b1"
        config = Configuration(
            servers=(Server("example.com", locations=(Location("/", backend="svc"),)),),
            backends=(Backend("svc", endpoints=(b0.endpoint,)),),
        )
        result = dataplane.apply(config)          # render, nginx -t, start/reload, push to Lua
        assert result.ok, result.error
        r = dataplane.get("/", host="example.com")   # httpx response via the http listener
        assert r.text == "b0"

``dataplane`` (one nginx master per test, stopped afterwards):

* ``apply(config) -> ApplyResult``: the production ``DataPlane.apply`` after
  replacing ``config.settings.listen`` with this instance's ports (and, when
  the tests run as root, ``workers.user`` with root; 2 worker processes unless
  the config sets a number).
* ``get(path, host=..., https=False, **httpx_kwargs)``: one request (verify off for https).
* ``http_port``, ``http_url``, ``https_port``, ``https_url``, ``state_dir``.
* ``nginx``: the ``NginxProcess`` (``master_pid()``, ``worker_pids()``, ``kill_master()``, ``start()``).
* ``lua``: the ``LuaClient`` (``push``, ``get``, ``checksum``).
* ``plane``: the ``DataPlane`` itself; ``registry``: its prometheus registry.
* ``watch(interval)``: call ``plane.check`` from a thread, as the controller's nginx watcher does.
* ``stop()``: stop nginx (also done at teardown).

The fixture skips the test when the Lua modules are not there yet.
``backends`` comes from ``tests/helpers/backends.py`` (see there).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from platformd import paths
from platformd.ingress.dataplane import ApplyResult, DataPlane
from platformd.ingress.luaclient import LuaClient
from platformd.ingress.model import Configuration, Listen
from platformd.ingress.nginx import NginxFiles, NginxProcess, ensure_default_certificate
from platformd.ingress.view import RuntimePaths
from tests.helpers.backends import backends, free_port  # noqa: F401  (fixture re-export)

LUA_MODULES = ("platform.lua", "balancer.lua", "certificate.lua", "configuration.lua")
NGINX = "/usr/sbin/nginx"


def lua_ready() -> bool:
    return all((paths.lua_dir() / name).is_file() for name in LUA_MODULES)


class DataPlaneHarness:
    def __init__(self) -> None:
        # A short path of our own: tmp_path can exceed the 107 bytes a unix
        # socket path may have.
        self.state_dir = Path(tempfile.mkdtemp(prefix="pd-"))
        self.http_port = free_port()
        self.https_port = free_port()
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        self.https_url = f"https://127.0.0.1:{self.https_port}"
        cert, key = ensure_default_certificate(self.state_dir / "certs")
        self.runtime = RuntimePaths(self.state_dir, paths.lua_dir(), cert, key)
        self.nginx = NginxProcess(NginxFiles(self.state_dir))
        self.lua = LuaClient(self.runtime.socket)
        self.registry = CollectorRegistry()
        self.plane = DataPlane(self.nginx, self.lua, self.runtime, self.registry)
        self._stop_watch = threading.Event()
        self._watchers: list[threading.Thread] = []
        self._http = httpx.Client(timeout=10)
        self._https = httpx.Client(timeout=10, verify=False)

    def localize(self, config: Configuration) -> Configuration:
        """``config`` with this instance's ports and a worker set-up fit for tests."""
        settings = config.settings
        workers = settings.workers
        if workers.processes is None:
            workers = replace(workers, processes=2)
        if os.geteuid() == 0 and workers.user is None:
            workers = replace(workers, user="root")
        listen = replace(settings.listen, http_port=self.http_port, https_port=self.https_port)
        return replace(config, settings=replace(settings, listen=listen, workers=workers))

    def apply(self, config: Configuration) -> ApplyResult:
        return self.plane.apply(self.localize(config))

    def get(self, path: str = "/", host: str | None = None, https: bool = False, **kwargs) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if host:
            headers["Host"] = host
        client = self._https if https else self._http
        url = (self.https_url if https else self.http_url) + path
        return client.get(url, headers=headers, **kwargs)

    def watch(self, interval: float = 0.05) -> None:
        """Call ``check`` as the controller's nginx watcher does (platformd.ingress.main)."""
        def loop() -> None:
            while not self._stop_watch.wait(interval):
                self.plane.check()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self._watchers.append(thread)

    def error_log(self) -> str:
        try:
            return self.nginx.files.error_log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        self._stop_watch.set()
        for thread in self._watchers:
            thread.join(timeout=5)
        self.nginx.stop()

    def close(self) -> None:
        self.stop()
        self.lua.close()
        self._http.close()
        self._https.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)


@pytest.fixture
def dataplane():
    if not shutil.which(NGINX) and not os.path.exists(NGINX):
        pytest.skip("nginx is not installed")
    if not lua_ready():
        pytest.skip("lua/ modules are not there yet")
    harness = DataPlaneHarness()
    try:
        yield harness
    finally:
        harness.close()
