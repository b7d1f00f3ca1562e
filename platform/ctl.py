"""`platformctl`: the running node at a glance.

    platformctl status [--output table|json]   programs, controllers, data plane; exit 1 when unhealthy
    platformctl backends                         what the Lua balancer has loaded
    platformctl conf                             the running nginx.conf
    platformctl ipvs                             IPVS virtual and real servers, like ``ipvsadm -Ln``

With no flags it finds a ``platformd`` started on this machine by the same
user (``make demo``, ``platformd --role ... --state-dir ./run``) from the
pointer that run writes (``platformd.localrun``). Otherwise ``status`` asks
the combined health server at ``--url`` (default http://127.0.0.1:10254, the
port in a pod) and ``backends``/``conf`` read the ingress state directory
``--state-dir`` (default: ``platformd``'s); flags always win. ``ipvs`` reads
the kernel over netlink.

Exit status: 0 healthy / done, 1 unhealthy, 2 could not ask (unreachable,
missing files, bad flags), with a one-line reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from platformd import localrun
from platformd.supervise import DEFAULT_HEALTH_PORT, default_state_dir

EXIT_OK, EXIT_UNHEALTHY, EXIT_UNREACHABLE = 0, 1, 2
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_HEALTH_PORT}"


class CtlError(Exception):
    """Could not get the answer; the message is one line for the user."""


def _nothing_found() -> str:
    return (f"no local platformd recorded in {localrun.pointer_path()} (start one: make demo, or "
            "platformd --role ingress ...; or name it with --url / --state-dir)")


def health_url(args: argparse.Namespace) -> tuple[str, bool]:
    """(URL, whether someone named it): --url, else the local run's, else the default."""
    if args.url:
        return args.url, True
    pointer = localrun.read()
    if pointer is not None and pointer.health_url:
        return pointer.health_url, True
    return DEFAULT_URL, False


def fetch_status(url: str, timeout: float = 5.0, named: bool = True) -> dict[str, Any]:
    try:
        resp = httpx.get(url.rstrip("/") + "/status", timeout=timeout)
    except httpx.ConnectError:
        if not named:
            raise CtlError(f"nothing answers at {url}, and {_nothing_found()}") from None
        raise CtlError(f"health server at {url} is not reachable (is platformd running? try --url)") from None
    except httpx.HTTPError as exc:
        raise CtlError(f"health server at {url} did not answer: {exc}") from None
    if resp.status_code != 200:
        raise CtlError(f"health server at {url} answered HTTP {resp.status_code}")
    try:
        return resp.json()
    except ValueError:
        raise CtlError(f"health server at {url} sent something that is not JSON") from None


def _duration(seconds: float | int | None) -> str:
    if not seconds:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip()] + [fmt.format(*r).rstrip() for r in rows]


def render_status_table(doc: dict[str, Any]) -> str:
    """The status document as the human table (pure, for tests)."""
    out = [f"role: {doc.get('role', '?')}    healthy: {'yes' if doc.get('healthy') else 'NO'}"
           f"    ready: {'yes' if doc.get('ready') else 'no'}", ""]
    rows = [[p["name"], p["state"], str(p.get("pid") or "-"), _duration(p.get("uptime_seconds")),
             str(p.get("restarts", 0))] for p in doc.get("programs", [])]
    out += _table(["PROGRAM", "STATE", "PID", "UPTIME", "RESTARTS"], rows)
    comps = doc.get("components", {})
    ingress = (comps.get("ingress") or {}).get("status") or {}
    out += _gateway_api(ingress.get("gateway_api") or {})
    if "ingress" in comps:
        out += ["", "ingress:"]
        out += _kv([
            ("healthy", _yes(comps["ingress"].get("healthy"))),
            ("informers synced", _yes(ingress.get("informers_synced"))),
            ("last sync", _ago(ingress.get("last_sync_time"))),
            ("config checksum", str(ingress.get("config_checksum") or "-")),
            ("reloads", f"{ingress.get('reload_count', 0)} (last: {ingress.get('last_reload_result') or '-'})"),
            ("ingresses", str(ingress.get("ingresses", "-"))),
            ("backends", str(ingress.get("backends", "-"))),
            ("endpoints", str(ingress.get("endpoints", "-"))),
        ])
        out += _refused(ingress)
    nodeproxy = (comps.get("nodeproxy") or {}).get("status") or {}
    if "nodeproxy" in comps:
        out += ["", "nodeproxy:"]
        dur = nodeproxy.get("last_sync_duration_seconds")
        out += _kv([
            ("healthy", _yes(comps["nodeproxy"].get("healthy"))),
            ("last sync", _ago(nodeproxy.get("last_sync_time"))),
            ("sync duration", f"{dur * 1000:.1f} ms" if isinstance(dur, (int, float)) else "-"),
        ] + ([("mode", "nftables"), ("services", str(nodeproxy.get("services", "-"))),
              ("chains", str(nodeproxy.get("chains", "-"))),
              ("last transaction", f"{nodeproxy.get('last_transaction_size', '-')} changes")]
             if nodeproxy.get("mode") == "nftables" else
             [("virtual servers", str(nodeproxy.get("virtual_servers", "-"))),
              ("real servers", str(nodeproxy.get("real_servers", "-")))]))
    if doc.get("problems"):
        out += ["", "problems:"] + [f"  - {p}" for p in doc["problems"]]
    return "\n".join(out) + "\n"


def _refused(status: dict[str, Any], shown: int = 20) -> list[str]:
    """The ingress controller's refused objects, one line each."""
    problems = status.get("problems") or []
    if not problems:
        return []
    total = status.get("problems_total", len(problems))
    out = [f"  refused objects: {total}"]
    for p in problems[:shown]:
        where = f"{p.get('namespace')}/{p.get('name')}" if p.get("namespace") else p.get("name")
        out.append(f"    {p.get('kind')} {where}: {p.get('reason')}: {p.get('message')}")
    if total > shown:
        out.append(f"    ... and {total - shown} more (platformctl status -o json)")
    return out


def _kv(pairs: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in pairs)
    return [f"  {k + ':':<{width + 1}} {v}" for k, v in pairs]


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _ago(stamp: Any) -> str:
    if not isinstance(stamp, (int, float)) or stamp <= 0:
        return "never"
    return f"{_duration(max(1, time.time() - stamp))} ago"


def _gateway_api(gateway: dict[str, Any]) -> list[str]:
    """The ingress controller's Gateway API counts, and what is not accepted or not served."""
    if not gateway.get("synced"):
        return []
    out = ["", "gateway api:"]
    out += _kv([("gateways", str(gateway.get("gateways", 0))), ("httproutes", str(gateway.get("http_routes", 0))),
                ("grpcroutes", str(gateway.get("grpc_routes", 0))),
                ("not accepted", str(len(gateway.get("not_accepted") or ()))),
                ("hosts not served", str(len(gateway.get("not_served") or ()))),
                ("last error", str(gateway.get("last_error") or "-"))])
    out += [f"  - {line}" for line in gateway.get("not_accepted") or ()]
    return out + [f"  - host {line}" for line in gateway.get("not_served") or ()]


def cmd_status(args: argparse.Namespace) -> int:
    url, named = health_url(args)
    doc = fetch_status(url, named=named)
    if args.output == "json":
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_status_table(doc))
    return EXIT_OK if doc.get("healthy") else EXIT_UNHEALTHY


def _nginx_files(args: argparse.Namespace):
    """The ingress files of --state-dir, else of the local run, else of the default state dir."""
    from platformd.ingress.layout import NginxFiles  # the one place that knows the layout

    state_dir, hint = args.state_dir, "try --state-dir"
    if state_dir is None:
        pointer = localrun.read()
        if pointer is not None:
            state_dir = Path(pointer.state_dir)
        else:
            state_dir, hint = default_state_dir(), _nothing_found()
    return NginxFiles(state_dir / "ingress"), hint


def cmd_backends(args: argparse.Namespace) -> int:
    files, hint = _nginx_files(args)
    sock = files.socket
    if not sock.exists():
        raise CtlError(f"no configuration socket at {sock}: is the ingress role running? ({hint})")
    transport = httpx.HTTPTransport(uds=str(sock))
    try:
        with httpx.Client(transport=transport, base_url="http://nginx") as client:
            resp = client.get("/configuration/backends", timeout=5.0)
    except httpx.HTTPError as exc:
        raise CtlError(f"nginx configuration endpoint at {sock} did not answer: {exc}") from None
    if resp.status_code != 200:
        raise CtlError(f"nginx configuration endpoint answered HTTP {resp.status_code}")
    doc = resp.json()
    if args.output == "json":
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return EXIT_OK
    rows = []
    for b in doc.get("data") or []:
        eps = ", ".join(f"{e['address']}:{e['port']}" for e in b.get("endpoints", [])) or "(none)"
        algo = "sticky" if (b.get("session_affinity") or {}).get("type") == "cookie" else (
            "chash" if b.get("upstream_hash_by") else b.get("load_balance") or "round_robin")
        rows.append([b["name"], algo, eps])
    sys.stdout.write(f"checksum: {doc.get('checksum')}  version: {doc.get('version')}\n")
    sys.stdout.write("\n".join(_table(["BACKEND", "ALGORITHM", "ENDPOINTS"], rows)) + "\n")
    return EXIT_OK


def cmd_conf(args: argparse.Namespace) -> int:
    files, hint = _nginx_files(args)
    conf = files.conf
    try:
        sys.stdout.write(conf.read_text())
    except OSError as exc:
        raise CtlError(f"cannot read {conf}: {exc.strerror}: is the ingress role running? ({hint})") from None
    return EXIT_OK


def cmd_ipvs(args: argparse.Namespace) -> int:
    from platformd.nodeproxy import ipvsview

    sys.stdout.write(ipvsview.render())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="platformctl", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="programs, controllers and data plane at a glance")
    status.add_argument("--output", "-o", choices=("table", "json"), default="table")
    status.add_argument("--url", help=f"combined health server (default: the local run's, else {DEFAULT_URL})")
    status.set_defaults(func=cmd_status)
    backends = sub.add_parser("backends", help="what the Lua balancer has loaded")
    backends.add_argument("--output", "-o", choices=("table", "json"), default="table")
    backends.add_argument("--state-dir", type=Path, help="platformd's --state-dir (default: the local run's)")
    backends.set_defaults(func=cmd_backends)
    conf = sub.add_parser("conf", help="the running nginx.conf")
    conf.add_argument("--state-dir", type=Path, help="platformd's --state-dir (default: the local run's)")
    conf.set_defaults(func=cmd_conf)
    ipvs = sub.add_parser("ipvs", help="IPVS virtual and real servers (like ipvsadm -Ln)")
    ipvs.set_defaults(func=cmd_ipvs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CtlError as exc:
        print(f"platformctl: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
