"""``make demo`` (``python -m platformd.demo``): the ingress role on this machine, no cluster.

What it does:

1. starts three small HTTP backends on 127.0.0.1 (``web``, ``web-canary``,
   ``api``; ports 18081-18083, or free ones if those are taken);
2. copies the manifests of ``examples/demo`` (an IngressClass, three
   Services, their EndpointSlices pointing at the backends, an Ingress with
   two paths and a canary Ingress, and a Gateway with an HTTPRoute) into a
   scratch folder, with the backends' real ports;
3. runs ``platformd --role ingress --source <folder>`` (supervisord with
   nginx, the controller and the health server) on unprivileged ports;
   if that does not come up it falls back to ``platformd ingress`` alone and
   says so;
4. prints curl commands to try, and runs until Ctrl-C (or ``--duration``).

Edit the copied manifests while it runs: the file source picks changes up
within a second (an Ingress change reloads nginx, an endpoint change does not).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from platformd import localrun, paths

BACKENDS = (("web", 18081), ("web-canary", 18082), ("api", 18083))
HOST = "demo.local"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        name, port = self.server.demo_name, self.server.server_address[1]  # type: ignore[attr-defined]
        body = f"{name}: hello from the demo backend on 127.0.0.1:{port} (path {self.path})\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Backend", name)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:  # skip HTTPServer's reverse DNS lookup
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def start_backend(name: str, port: int) -> _Server:
    try:
        server = _Server(("127.0.0.1", port), _Handler)
    except OSError:
        server = _Server(("127.0.0.1", 0), _Handler)  # the usual port is taken: any port will do
    server.demo_name = name  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name=f"demo-{name}", daemon=True).start()
    return server


def examples_dir() -> Path:
    return paths.share_dir() / "examples" / "demo"


def write_manifests(folder: Path, ports: dict[str, int]) -> None:
    """Copy the demo manifests, with the EndpointSlices' ports set to ``ports``."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    for source in sorted(examples_dir().glob("*.yaml")):
        text = source.read_text()
        docs = [d for d in yaml.safe_load_all(text) if d]
        slices = [d for d in docs if d.get("kind") == "EndpointSlice"]
        for doc in slices:
            service = doc["metadata"]["labels"]["kubernetes.io/service-name"]
            doc["ports"][0]["port"] = ports[service]
        if slices:
            text = "# Written by platformd.demo with the demo backends' ports.\n" + yaml.safe_dump_all(docs)
        (folder / source.name).write_text(text)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _serving(http_port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", http_port), timeout=1) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return False
    return data.startswith(b"HTTP/1.1 200") and b"hello from the demo backend" in data


def _wait_serving(process: subprocess.Popen, http_port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if _serving(http_port):
            return True
        time.sleep(0.3)
    return False


def _stop(process: subprocess.Popen, timeout: float = 40) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m platformd.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--http-port", type=int, default=18080)
    p.add_argument("--https-port", type=int, default=18443)
    p.add_argument("--health-port", type=int, default=18254, help="combined health server")
    p.add_argument("--internal-port", type=int, default=18281, help="the controller's own /status server")
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a new one in /tmp)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--no-supervisor", action="store_true", help="run `platformd ingress` without supervisord")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for port in (args.http_port, args.https_port, args.health_port, args.internal_port):
        if not _port_free(port):
            print(f"demo: port {port} is in use; pick others with --http-port/--https-port/--health-port/"
                  "--internal-port", file=sys.stderr)
            return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="platform-demo-"))
    manifests, state = workdir / "manifests", workdir / "state"
    servers = [start_backend(name, port) for name, port in BACKENDS]
    process = None
    try:
        write_manifests(manifests, {s.demo_name: s.server_address[1] for s in servers})  # type: ignore[attr-defined]
        common = ["--source", str(manifests), "--http-port", str(args.http_port), "--https-port", str(args.https_port)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        mode = "supervisor"
        if not args.no_supervisor:
            process = subprocess.Popen([sys.executable, "-m", "platformd.cli", "--role", "ingress", *common,
                                        "--state-dir", str(state), "--health-port", str(args.health_port),
                                        "--health-address", "127.0.0.1",
                                        "--ingress-internal-port", str(args.internal_port)], env=env)
            if not _wait_serving(process, args.http_port, 45):
                print("demo: the supervisor path (platformd --role ingress) did not come up; "
                      "falling back to `platformd ingress` alone", file=sys.stderr, flush=True)
                _stop(process)
                process = None
        if process is None:
            mode = "standalone"
            process = subprocess.Popen([sys.executable, "-m", "platformd.cli", "ingress", *common,
                                        "--state-dir", str(state / "ingress"), "--healthz-host", "127.0.0.1",
                                        "--healthz-port", str(args.internal_port)], env=env)
            if not _wait_serving(process, args.http_port, 45):
                print("demo: the ingress controller did not come up; see the log above", file=sys.stderr)
                return 1
        if mode == "standalone":  # platformd --role records itself; platformd ingress alone does not
            localrun.write(localrun.Pointer(pid=process.pid, role="ingress", state_dir=str(state),
                                            health_url=f"http://127.0.0.1:{args.internal_port}"))
        _explain(args, manifests, mode, state / "ingress")
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while not stop.wait(0.5):
            if process.poll() is not None:
                print(f"demo: the ingress role exited with status {process.returncode}", file=sys.stderr)
                return 1
            if deadline is not None and time.monotonic() > deadline:
                break
        return 0
    finally:
        if process is not None:
            localrun.remove(process.pid)
            _stop(process)
        for server in servers:
            server.shutdown()
            server.server_close()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _explain(args: argparse.Namespace, manifests: Path, mode: str, state_dir: Path) -> None:
    url = f"http://127.0.0.1:{args.http_port}"
    lines = [
        "",
        f"The demo ingress is serving ({'supervisord: nginx + controller + health' if mode == 'supervisor' else 'platformd ingress alone'}).",
        "Try:",
        f"  curl -H 'Host: {HOST}' {url}/                       # web",
        f"  curl -H 'Host: {HOST}' {url}/api/items              # api",
        f"  curl -H 'Host: {HOST}' -H 'X-Canary: always' {url}/ # web-canary (canary by header)",
        f"  for i in $(seq 10); do curl -s -H 'Host: {HOST}' {url}/; done   # ~20% web-canary by weight",
        f"  curl -k --resolve {HOST}:{args.https_port}:127.0.0.1 https://{HOST}:{args.https_port}/   # TLS, default certificate",
        f"  curl -H 'Host: gateway.demo.local' {url}/api/items  # api, by an HTTPRoute (Gateway API)",
        f"  curl -H 'Host: nothing.local' {url}/                # 404: no such host",
        f"  curl http://127.0.0.1:{args.internal_port}/status          # controller status (JSON)",
        f"  curl http://127.0.0.1:{args.internal_port}/metrics         # Prometheus metrics",
    ]
    if mode == "supervisor":
        lines.append(f"  curl http://127.0.0.1:{args.health_port}/healthz          # combined health")
    ctl = Path(sys.executable).with_name("platformctl")
    lines += [
        f"  {ctl} status     # programs, informers, reloads (no flags needed)",
        f"  {ctl} backends   # what the Lua balancer has loaded",
        f"  {ctl} conf       # the running nginx.conf",
        "Logs: supervisord, nginx, the controller and the health server all write to this terminal,",
        "  each line naming its program (PLATFORM_LOG_FORMAT=json for JSON lines);",
        f"  runtime files (nginx.conf, pid, socket) are in {state_dir}.",
        f"Edit the manifests in {manifests} and watch the changes apply.", "Ctrl-C stops the demo.", ""]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
