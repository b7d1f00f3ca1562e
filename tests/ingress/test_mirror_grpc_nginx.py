"""A gRPC route's mirrored copy is a gRPC call: through a real nginx, an
HTTP/2 client (curl) calls a gRPC-lane route whose backend and mirror are
h2c servers (bare nginx with `listen ... http2`, each logging the calls it
gets); the test waits for the copy's log line, no sleeps."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from platformd.ingress import headers as h
from platformd.ingress.mirror import Mirror
from platformd.ingress.model import Backend, BackendProtocol, Configuration, Endpoint, Location, ProxySettings, Server
from tests.helpers.backends import free_port
from tests.helpers.waiting import wait_for


class H2cBackend:
    """nginx speaking h2c, answering like a gRPC server (grpc-status 0) and
    logging "<uri> <content-type> <x-env> <body bytes>" per call."""

    def __init__(self, name: str) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pd-h2c-"))
        self.log = self.dir / "calls.log"
        user = "user root;\n" if os.geteuid() == 0 else ""
        (self.dir / "nginx.conf").write_text(
            f"{user}worker_processes 1;\npid {self.dir}/nginx.pid;\nerror_log {self.dir}/error.log;\n"
            "events { worker_connections 64; }\n"
            "http {\n"
            f" client_body_temp_path {self.dir}/body; proxy_temp_path {self.dir}/proxy;\n"
            f" fastcgi_temp_path {self.dir}/fcgi; uwsgi_temp_path {self.dir}/uwsgi; scgi_temp_path {self.dir}/scgi;\n"
            " log_format calls '$request_uri $http_content_type $http_x_env $request_length';\n"
            f" access_log {self.log} calls;\n"
            f" server {{ listen 127.0.0.1:{self.port} http2;\n"
            f"  location / {{ add_header grpc-status 0; add_header X-Backend {name}; return 200 \"\"; }} }}\n}}\n")
        self.proc = subprocess.Popen(
            ["/usr/sbin/nginx", "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-g", "daemon off;"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        wait_for(listening, timeout=10, ignore=(OSError,), message=f"h2c backend {name}")

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint("127.0.0.1", self.port)

    def calls(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except OSError:
            return []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            self.proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def h2c():
    made: list[H2cBackend] = []

    def make(name: str) -> H2cBackend:
        made.append(H2cBackend(name))
        return made[-1]
    yield make
    for b in made:
        b.stop()


def grpc_call(dataplane, path: str) -> subprocess.CompletedProcess:
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    url = f"https://app.example:{dataplane.https_port}{path}"
    return subprocess.run(
        ["curl", "-sk", "--http2", "--resolve", f"app.example:{dataplane.https_port}:127.0.0.1", "-o", "/dev/null",
         "-w", "%{http_code} %{http_version}", "-H", "content-type: application/grpc", "-H", "te: trailers",
         "--data-binary", "@-", url],
        input=b"\x00\x00\x00\x00\x03abc", capture_output=True, timeout=20)


def test_a_grpc_route_mirrors_a_grpc_call(dataplane, h2c):
    web, shadow = h2c("web"), h2c("shadow")
    program = h.from_modifier("request", set=[("X-Env", "mirrored")])
    loc = Location("/", backend="web", proxy=ProxySettings(protocol=BackendProtocol.GRPC),
                   mirror=Mirror(backend="shadow-svc"), headers=program)
    result = dataplane.apply(Configuration(servers=(Server("app.example", locations=(loc,)),), backends=(
        Backend("web", endpoints=(web.endpoint,)), Backend("shadow-svc", endpoints=(shadow.endpoint,)))))
    assert result.ok, dataplane.error_log()[-2000:]
    done = grpc_call(dataplane, "/pkg.Greeter/SayHello")
    assert done.stdout.decode() == "200 2", (done, dataplane.error_log()[-2000:])
    copy = wait_for(lambda: shadow.calls(), 10, message="the copy of the call arrives")
    assert copy[0].split()[:3] == ["/pkg.Greeter/SayHello", "application/grpc", "mirrored"]
    assert web.calls()[0].split()[:3] == ["/pkg.Greeter/SayHello", "application/grpc", "mirrored"]
