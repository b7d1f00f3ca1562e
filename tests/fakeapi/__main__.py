"""Run the fake API server on its own: `python -m tests.fakeapi --port 0 --kubeconfig FILE`.

Prints the URL on stdout (one line, flushed) once it is serving, then runs
until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import csv
import signal
import sys
import threading

from .server import FakeApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakeapi")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("--token", help="bearer token to put in the kubeconfig "
                                        "(with --rbac it is registered as an admin token)")
    parser.add_argument("--token-auth-file",
                        help="CSV like kube-apiserver's: token,user,uid[,\"group1,group2\"]")
    parser.add_argument("--load", help="directory of YAML manifests to create at start")
    parser.add_argument("--history-limit", type=int, default=1000)
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    parser.add_argument("--rbac", action="store_true", help="enforce RBAC with bearer tokens")
    parser.add_argument("--tls", action=argparse.BooleanOptionalAction, default=None,
                        help="serve https with a self-signed certificate (default: with --rbac)")
    args = parser.parse_args(argv)

    srv = FakeApiServer(history_limit=args.history_limit, rbac=args.rbac,
                        bookmark_interval=args.bookmark_interval, port=args.port, host=args.host,
                        tls=args.tls)
    if args.token and args.rbac:
        srv.add_token(args.token, "admin", ["system:masters"])
    if args.token_auth_file:
        with open(args.token_auth_file, newline="") as f:
            for row in csv.reader(f):
                if len(row) >= 2 and not row[0].startswith("#"):
                    groups = [g for g in (row[3] if len(row) > 3 else "").split(",") if g]
                    srv.add_token(row[0], row[1], groups)
    if args.load:
        srv.load_manifests(args.load)
    srv.start()
    if args.kubeconfig:
        srv.write_kubeconfig(args.kubeconfig, token=args.token)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(srv.url, flush=True)
    done.wait()
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
