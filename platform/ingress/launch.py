"""``platformd nginx``: nginx in the foreground for supervisord (``--role ingress``).

Takes the same flags as ``platformd ingress`` (supervise passes the ingress
flags to both programs) and uses ``--state-dir``, ``--http-port`` and
``--https-port``:

1. if ``<state dir>/nginx.conf`` is missing, render a bootstrap configuration
   for an empty ``Configuration`` (every request answers 404 until the
   controller's first sync reloads it); an existing file is kept, so a
   restarted nginx serves the last configuration the controller applied and
   the controller only re-pushes the dynamic state;
2. make sure the configuration socket's directory is private (``layout``:
   ``private/`` is 0700 and ours, the state directory not writable by
   others; otherwise refuse to start), and remove a stale configuration
   socket (a crashed nginx leaves it behind and the new one could not bind
   it; ``nginx-*.sock`` directly in the state directory is the old place);
3. exec ``python -m platformd.logpipe --name nginx -- nginx -p D -c D/nginx.conf
   -e D/logs/error.log -g 'daemon off;'``: logpipe tags nginx's output and
   forwards supervisord's signals (QUIT drains).
"""

from __future__ import annotations

import logging
import os
import sys

from platformd.ingress.main import StartError, build_parser, make_dataplane, state_dir_of
from platformd.ingress.orphans import stop_orphaned_workers

log = logging.getLogger("platformd.nginx")

NGINX_BINARY = "/usr/sbin/nginx"


def bootstrap(args) -> list[str]:
    """Prepare the state dir; the argv to exec. Raises ``StartError``.

    A restart after a crash (configuration and certificate exist) imports and
    renders nothing: traffic is down until nginx is back, so keep it short.
    """
    from platformd.ingress.nginx import NginxFiles

    files = NginxFiles(state_dir_of(args))
    if not files.conf.exists() or not (files.state_dir / "certs" / "default.key").exists():
        _write_bootstrap(args)
    try:
        files.prepare()
    except OSError as exc:  # UnsafeLayout among them: never run with a socket others can reach
        raise StartError(str(exc)) from None
    # A master killed with -9 leaves its workers serving on our ports; the
    # new master could not bind until they let go (see orphans.py).
    sockets = [*files.state_dir.glob("nginx-*.sock"), *files.private_dir.glob("nginx-*.sock")]
    stop_orphaned_workers({args.http_port, args.https_port}, {str(p) for p in sockets})
    # nginx removes its unix sockets only on a clean exit; a stale file makes
    # bind() fail with "Address already in use".
    for stale in sockets:
        stale.unlink(missing_ok=True)
    binary = NGINX_BINARY if os.path.exists(NGINX_BINARY) else "nginx"
    log_format = os.environ.get("PLATFORM_LOG_FORMAT", "text")
    return [sys.executable, "-m", "platformd.logpipe", "--name", "nginx", "--format", log_format, "--",
            binary, "-p", str(files.state_dir), "-c", str(files.conf), "-e", str(files.error_log),
            "-g", "daemon off;"]


def _write_bootstrap(args) -> None:
    """The default certificate, and nginx.conf for an empty configuration (tested first)."""
    from prometheus_client import CollectorRegistry

    from platformd.ingress.model import Configuration, GlobalSettings, Listen
    from platformd.ingress.nginx import NginxError
    from platformd.ingress.render import render_nginx_conf

    plane = make_dataplane(args, CollectorRegistry())  # makes the certificate
    files = plane.nginx.files
    files.prepare()
    if files.conf.exists():
        return
    config = Configuration(settings=GlobalSettings(listen=Listen(args.http_port, args.https_port)))
    try:
        plane.nginx.install(render_nginx_conf(config, plane.runtime))
    except NginxError as exc:
        raise StartError(" ".join(str(exc).split())) from None
    log.info("wrote bootstrap configuration %s", files.conf)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from platformd.common import logs
        logs.setup("nginx")
    except Exception:  # noqa: BLE001
        logging.basicConfig(level=logging.INFO)
    args.state_dir = state_dir_of(args)
    try:
        command = bootstrap(args)
    except StartError as exc:
        print(f"nginx: {exc}", file=sys.stderr, flush=True)
        return 1
    os.execv(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
