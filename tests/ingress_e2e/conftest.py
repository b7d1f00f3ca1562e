"""End-to-end fixtures: fake API server, real nginx, backends in network namespaces.

``ingress_controller(*flags, source=None)`` runs the real ``platformd ingress``
(``platformd.ingress.main.run``) in a thread against the ``fake_api`` fixture
(or a ``--source`` folder) on free ports, with its own nginx, and returns a
``RunningController``:

* ``get(path, host=..., https=False, **kw)``: a request through nginx;
* ``internal(path)``: a request to the internal server (/healthz, /status, ...);
* ``status()``: ``/status`` as a dict; ``wait_ready()``; ``stop()``;
* ``state_dir``.

``netns_backends(names)`` makes ``NetnsBackends`` cleaned up after the test.
``wait_for(fn, timeout)`` polls until ``fn()`` is truthy and returns its value.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from pathlib import Path

import httpx
import pytest

from tests.helpers import waiting
from tests.helpers.backends import free_port
from tests.ingress_e2e.netns import NetnsBackends

NGINX = "/usr/sbin/nginx"


#: tests.helpers.waiting.wait_for, with a server that still starts counting as "not yet"
wait_for = functools.partial(waiting.wait_for, ignore=(httpx.HTTPError, OSError))


class RunningController:
    def __init__(self, flags: list[str]) -> None:
        from platformd.ingress import main as ingress_main

        self.state_dir = Path(tempfile.mkdtemp(prefix="pdi-"))
        self.http_port, self.https_port, self.healthz_port = free_port(), free_port(), free_port()
        argv = ["--state-dir", str(self.state_dir), "--http-port", str(self.http_port),
                "--https-port", str(self.https_port), "--healthz-port", str(self.healthz_port),
                "--healthz-host", "127.0.0.1", "--sync-rate-limit", "20", *flags]
        self.args = ingress_main.build_parser().parse_args(argv)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.exit_code: int | None = None
        self._http = httpx.Client(timeout=10)
        self._https = httpx.Client(timeout=10, verify=False)
        self._thread = threading.Thread(target=self._run, args=(ingress_main,), daemon=True)
        self._thread.start()

    def _run(self, ingress_main) -> None:
        try:
            self.exit_code = ingress_main.run(self.args, self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def get(self, path: str = "/", host: str | None = None, https: bool = False, **kwargs) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if host:
            headers["Host"] = host
        if https:
            url = f"https://127.0.0.1:{self.https_port}{path}"
            extensions = {"sni_hostname": host} if host else None
            return self._https.get(url, headers=headers, extensions=extensions, **kwargs)
        return self._http.get(f"http://127.0.0.1:{self.http_port}{path}", headers=headers, **kwargs)

    def internal(self, path: str) -> httpx.Response:
        return self._http.get(f"http://127.0.0.1:{self.healthz_port}{path}")

    def status(self) -> dict:
        return self.internal("/status").json()

    def wait_ready(self, timeout: float = 20.0) -> None:
        def ready():
            if self.error is not None:
                raise AssertionError(f"controller failed: {self.error!r}")
            return self.internal("/readyz").status_code == 200
        wait_for(ready, timeout, message="controller ready")

    def wait_served(self, host: str, path: str, body: str, timeout: float = 10.0, **kwargs) -> httpx.Response:
        return wait_for(lambda: (r := self.get(path, host=host, **kwargs)).text == body and r,
                        timeout, message=f"{host}{path} -> {body}")

    def stop(self) -> None:
        self.stop_event.set()
        self._thread.join(timeout=30)
        self._http.close()
        self._https.close()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)


@pytest.fixture
def ingress_controller(fake_api):
    if not os.path.exists(NGINX):
        pytest.skip("nginx is not installed")
    started: list[RunningController] = []

    def start(*flags: str, source: str | None = None, api: bool = True) -> RunningController:
        extra = ["--source", source] if source else ["--kubeconfig", str(fake_api.kubeconfig)]
        running = RunningController([*extra, *flags])
        started.append(running)
        return running

    yield start
    for running in started:
        running.close()


@pytest.fixture
def netns_backends():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 for network namespaces")
    made: list[NetnsBackends] = []

    def make(names: list[str]) -> NetnsBackends:
        made.append(NetnsBackends(names))
        return made[-1]

    yield make
    for n in made:
        n.close()
