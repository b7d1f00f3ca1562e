"""The combined health server: one port for the whole pod (default 10254).

    /healthz  200 only when every program the role needs is RUNNING and every
              component's own health endpoint says healthy; 503 otherwise
    /readyz   200 when healthy and every component is ready (informers synced,
              first sync applied); 503 otherwise
    /status   JSON: programs (state, pid, uptime, restarts) and each
              component's own /status document
    /metrics  every component's metrics in one exposition, each sample
              labelled with the ``program`` it came from, plus
              ``platform_program_up`` and ``platform_program_restarts``

Process state comes from supervisord's XML-RPC interface over its unix
socket. Component endpoints are internal 127.0.0.1 ports (see supervise.py).
Each request asks afresh (with short timeouts) rather than caching: a probe
must see the state of now, and the probes come a few times a minute.
"""

from __future__ import annotations

import argparse
import json
import configparser
import logging
import sys
import time
import xmlrpc.client
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from platformd.common import logs

log = logging.getLogger("platformd.health")

PROGRAMS_BY_ROLE = {
    "ingress": ("nginx", "ingress", "health"),
    "nodeproxy": ("nodeproxy", "health"),
    "all": ("nginx", "ingress", "nodeproxy", "health"),
}
COMPONENT_TIMEOUT = 2.0  # seconds; probes time out at 1-5 s, so stay well under


@dataclass(frozen=True)
class Component:
    """A component's internal endpoints (None where it has none)."""

    name: str
    health_url: str
    status_url: str | None
    ready_url: str | None
    metrics_url: str | None


@dataclass
class HealthSources:
    role: str
    supervisor_socket: Path
    components: list[Component] = field(default_factory=list)
    starts_file: Path | None = None

    def programs(self) -> list[dict[str, Any]]:
        """Program states from supervisord; raises OSError when it cannot be reached."""
        infos = supervisor_proxy(self.supervisor_socket).supervisor.getAllProcessInfo()
        starts = self._starts()
        out = []
        for info in infos:
            running = info["statename"] == "RUNNING"
            out.append({
                "name": info["name"],
                "state": info["statename"],
                "pid": info["pid"] or None,
                "uptime_seconds": max(0, info["now"] - info["start"]) if running else 0,
                "restarts": max(0, starts.get(info["name"], 1) - 1),
                "exit_status": info["exitstatus"],
                "error": info["spawnerr"] or None,
            })
        return sorted(out, key=lambda p: p["name"])

    def _starts(self) -> dict[str, int]:
        if not self.starts_file:
            return {}
        try:
            return {k: int(v) for k, v in json.loads(self.starts_file.read_text()).items()}
        except (OSError, ValueError):
            return {}


def supervisor_proxy(socket: Path) -> xmlrpc.client.ServerProxy:
    """XML-RPC to the supervisord whose control socket is ``socket``, with the
    credentials of the ``[supervisorctl]`` section of the ``supervisord.conf``
    beside it (platformd writes both; see supervise.render_config)."""
    from supervisor.xmlrpc import SupervisorTransport

    config = configparser.RawConfigParser()
    config.read(socket.parent / "supervisord.conf")
    username = config.get("supervisorctl", "username", fallback=None)
    password = config.get("supervisorctl", "password", fallback=None)
    transport = SupervisorTransport(username, password, serverurl=f"unix://{socket}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)


def _get(client: httpx.Client, url: str | None) -> httpx.Response | None:
    if not url:
        return None
    try:
        return client.get(url, timeout=COMPONENT_TIMEOUT)
    except httpx.HTTPError:
        return None


def evaluate(sources: HealthSources, client: httpx.Client) -> dict[str, Any]:
    """The whole health picture as one JSON-able document."""
    problems: list[str] = []
    try:
        programs = sources.programs()
    except (OSError, xmlrpc.client.Error) as exc:
        programs = []
        problems.append(f"supervisord unreachable: {exc}")
    by_name = {p["name"]: p for p in programs}
    for needed in PROGRAMS_BY_ROLE[sources.role]:
        state = by_name.get(needed, {}).get("state", "MISSING")
        if state != "RUNNING":
            problems.append(f"program {needed} is {state}")

    components: dict[str, Any] = {}
    ready = True
    for comp in sources.components:
        entry: dict[str, Any] = {}
        health = _get(client, comp.health_url)
        entry["healthy"] = health is not None and health.status_code == 200
        if not entry["healthy"]:
            detail = "unreachable" if health is None else f"HTTP {health.status_code}"
            problems.append(f"component {comp.name} unhealthy ({detail})")
        if comp.ready_url:
            r = _get(client, comp.ready_url)
            entry["ready"] = r is not None and r.status_code == 200
        else:
            entry["ready"] = entry["healthy"]
        ready = ready and entry["ready"]
        status = _get(client, comp.status_url)
        if status is not None and status.status_code == 200:
            try:
                entry["status"] = status.json()
            except ValueError:
                entry["status"] = None
        components[comp.name] = entry
    healthy = not problems
    return {
        "role": sources.role,
        "healthy": healthy,
        "ready": healthy and ready,
        "problems": problems,
        "programs": programs,
        "components": components,
        "time": time.time(),
    }


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def combined_metrics(sources: HealthSources, client: httpx.Client, doc: dict[str, Any]) -> str:
    """One exposition: our program gauges, then each component's families with
    a ``program`` label added (two processes' ``process_*`` families would
    otherwise collide)."""
    lines = [
        "# HELP platform_program_up 1 when the supervised program is RUNNING.",
        "# TYPE platform_program_up gauge",
    ]
    for p in doc["programs"]:
        lines.append(f'platform_program_up{{program="{_escape_label(p["name"])}"}} {1 if p["state"] == "RUNNING" else 0}')
    lines += ["# HELP platform_program_restarts Times supervisord restarted the program.",
              "# TYPE platform_program_restarts gauge"]
    for p in doc["programs"]:
        lines.append(f'platform_program_restarts{{program="{_escape_label(p["name"])}"}} {p["restarts"]}')
    lines += ["# HELP platform_healthy 1 when /healthz answers 200.", "# TYPE platform_healthy gauge",
              f"platform_healthy {1 if doc['healthy'] else 0}"]
    seen: set[str] = {"platform_program_up", "platform_program_restarts", "platform_healthy"}
    families: dict[str, tuple[str, str, list[str]]] = {}
    for comp in sources.components:
        resp = _get(client, comp.metrics_url)
        if resp is None or resp.status_code != 200:
            continue
        try:
            parsed = list(text_string_to_metric_families(resp.text))
        except ValueError as exc:
            log.warning("metrics of %s unparsable: %s", comp.name, exc)
            continue
        for fam in parsed:
            if fam.name in seen and fam.name not in families:
                continue
            help_text, mtype, samples = families.setdefault(fam.name, (fam.documentation, fam.type, []))
            for s in fam.samples:
                labels = dict(s.labels)
                labels["program"] = comp.name
                rendered = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in sorted(labels.items()))
                samples.append(f"{s.name}{{{rendered}}} {floatToGoString(s.value)}")
    for name in sorted(families):
        help_text, mtype, samples = families[name]
        lines.append(f"# HELP {name} {help_text}".rstrip())
        lines.append(f"# TYPE {name} {mtype}")
        lines.extend(samples)
    return "\n".join(lines) + "\n"


def make_handler(sources: HealthSources):
    client = httpx.Client()

    class Handler(BaseHTTPRequestHandler):
        server_version = "platform-health"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: probes are frequent
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, code: int, body: str, ctype: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path not in ("/healthz", "/readyz", "/status", "/metrics"):
                self._send(404, "not found\n", "text/plain")
                return
            doc = evaluate(sources, client)
            if path == "/healthz":
                body = "ok\n" if doc["healthy"] else "unhealthy: " + "; ".join(doc["problems"]) + "\n"
                self._send(200 if doc["healthy"] else 503, body, "text/plain")
            elif path == "/readyz":
                self._send(200 if doc["ready"] else 503, "ready\n" if doc["ready"] else "not ready\n", "text/plain")
            elif path == "/status":
                self._send(200, json.dumps(doc, sort_keys=True, indent=2) + "\n", "application/json")
            else:
                self._send(200, combined_metrics(sources, client, doc), "text/plain; version=0.0.4")

    return Handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="platformd health")
    parser.add_argument("--role", choices=tuple(PROGRAMS_BY_ROLE), required=True)
    parser.add_argument("--address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=10254)
    parser.add_argument("--supervisor-socket", type=Path, required=True)
    parser.add_argument("--ingress-url", help="base URL of the ingress controller's internal server")
    parser.add_argument("--nodeproxy-healthz-url", help="base URL of the node proxy's healthz server")
    parser.add_argument("--nodeproxy-metrics-url", help="base URL of the node proxy's metrics server")
    return parser


def sources_from_args(args: argparse.Namespace) -> HealthSources:
    comps: list[Component] = []
    if args.ingress_url:
        u = args.ingress_url.rstrip("/")
        comps.append(Component("ingress", f"{u}/healthz", f"{u}/status", f"{u}/readyz", f"{u}/metrics"))
    if args.nodeproxy_healthz_url:
        h = args.nodeproxy_healthz_url.rstrip("/")
        m = (args.nodeproxy_metrics_url or "").rstrip("/")
        comps.append(Component("nodeproxy", f"{h}/healthz", f"{h}/status", None, f"{m}/metrics" if m else None))
    return HealthSources(role=args.role, supervisor_socket=args.supervisor_socket, components=comps,
                         starts_file=args.supervisor_socket.parent / "starts.json")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.setup("health")
    sources = sources_from_args(args)
    try:
        server = ThreadingHTTPServer((args.address, args.port), make_handler(sources))
    except OSError as exc:
        print(f"platformd health: cannot listen on {args.address}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    server.daemon_threads = True
    log.info("combined health server on %s:%d for role %s", args.address, args.port, args.role)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
