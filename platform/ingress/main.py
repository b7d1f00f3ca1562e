"""``platformd ingress``: the ingress controller's command line and wiring.

Start-up, in order, and why:

1. flags; the source of objects: ``--source DIR`` (manifests, no cluster) or
   the API server (``--kubeconfig``, in-cluster, ``KUBECONFIG``). A bad
   kubeconfig or an unreachable API server is one line on stderr and exit 1:
   nothing else can work without it;
2. the data plane in ``--state-dir``: nginx started by us on the first sync,
   or, with ``--external-nginx``, run by supervisord (``platformd nginx``):
   we only write ``nginx.conf``, signal the master from ``nginx.pid`` and
   push the dynamic state again when that pid changes;
3. informers, the controller loop (which waits for every cache before its
   first sync), the internal server (``/healthz``, ``/readyz``, ``/status``,
   ``/metrics``);
4. with an API server: Events, and leader election for the status writer;
5. run until SIGTERM/SIGINT; then optionally clear the status we wrote,
   release the Lease, and stop nginx if we started it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from platformd.ingress.nginx import NginxTimeouts
from platformd.common.errors import EXIT_CONFIG

log = logging.getLogger("platformd.ingress")

#: Status is re-checked at least this often, so an Ingress whose status
#: someone else overwrote is put right within a minute (ingress-nginx: 60 s).
STATUS_RESYNC = 60.0
#: How often the nginx master pid is checked (a new master gets the dynamic
#: state again; a dead one, when we own it, is started by the next sync).
NGINX_CHECK_INTERVAL = 0.2  # a pid-file read and a /proc stat: cheap; a restarted nginx gets its backends fast
COMPONENT = "platform-ingress-controller"
#: How long nginx may take to test, start or reload a configuration. The
#: adapter's defaults (10 s for start and reload) suit tests, not big sites:
#: nginx parses the whole file each time, which at 10,000 Ingresses takes
#: seconds on an idle core and several times that on a busy node; giving up
#: early would leave them unserved (see nginx.NginxTimeouts).
NGINX_TIMEOUT = 180.0
NGINX_TIMEOUTS = NginxTimeouts(test=NGINX_TIMEOUT, start=NGINX_TIMEOUT, reload=NGINX_TIMEOUT)


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/run/platform/ingress")
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(base) / f"platform-{os.getuid()}" / "ingress"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return value


def _namespaced(text: str) -> str:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected namespace/name, got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="platformd ingress", description="Ingress controller (nginx + Lua data plane).")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, KUBECONFIG, ~/.kube/config)")
    p.add_argument("--source", metavar="DIR", help="read objects from the YAML manifests in DIR instead of an API server")
    p.add_argument("--watch-namespace", default=None, help="only watch this namespace (default: all)")
    p.add_argument("--ingress-class", default="platform", help="legacy kubernetes.io/ingress.class value that is ours")
    p.add_argument("--controller-class", default="k8s.io/platform-ingress",
                   help="IngressClass spec.controller value that is ours")
    p.add_argument("--watch-ingress-without-class", action="store_true",
                   help="also serve Ingresses that name no class")
    p.add_argument("--http-port", type=_port, default=80, help="public HTTP port (default 80)")
    p.add_argument("--https-port", type=_port, default=443, help="public HTTPS port (default 443)")
    p.add_argument("--healthz-port", type=_port, default=10254, help="port of /healthz, /readyz, /status, /metrics")
    p.add_argument("--healthz-host", default="0.0.0.0", help="address of that server (default 0.0.0.0)")
    p.add_argument("--publish-service", type=_namespaced, help="ns/name of the Service whose addresses go into status")
    p.add_argument("--publish-status-address", help="comma-separated addresses to put into status")
    p.add_argument("--update-status-on-shutdown", action="store_true",
                   help="clear the status of our Ingresses when stopping (leader only)")
    p.add_argument("--election-id", default="ingress-controller-leader", help="name of the leader election Lease")
    p.add_argument("--default-ssl-certificate", type=_namespaced, help="ns/name of the Secret for unknown TLS hosts")
    p.add_argument("--default-backend-service", type=_namespaced, help="ns/name of the Service for unmatched requests")
    p.add_argument("--configmap", type=_namespaced, help="ns/name of the ConfigMap with global settings")
    p.add_argument("--sync-rate-limit", type=_positive_float, default=0.3,
                   help="nginx reloads (global settings only) per second at most (default 0.3); route changes are not limited")
    p.add_argument("--allow-snippet-annotations", action="store_true", help="read configuration-snippet and server-snippet as a parsed subset of header directives "
                        "(docs/annotations.md); off, any snippet refuses its Ingress")
    p.add_argument("--enable-ssl-passthrough", action="store_true",
                   help="serve the ssl-passthrough annotation: nginx's stream module owns the HTTPS port")
    p.add_argument("--disable-svc-external-name", action="store_true",
                   help="refuse Services of type ExternalName as backends (ingress-nginx's flag)")
    p.add_argument("--state-dir", type=Path, default=None, help="nginx prefix, config and socket (default /run/platform/ingress)")
    from platformd.ingress import gateway_setup
    gateway_setup.add_arguments(p)
    p.add_argument("--external-nginx", action="store_true",
                   help="nginx is run by a supervisor (platformd nginx): never start it, reload via its pid file")
    _webhook_flags(p)
    return p


def _webhook_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("admission webhook (docs/webhook.md)")
    g.add_argument("--validating-webhook", metavar="[HOST]:PORT",
                   help="serve ValidatingAdmissionReviews over HTTPS on this address (e.g. :8443)")
    g.add_argument("--webhook-service", type=_namespaced,
                   help="ns/name of the webhook's Service: the names its certificate is made for")
    g.add_argument("--webhook-secret", type=_namespaced,
                   help="ns/name of the Secret that keeps the webhook's certificate")
    g.add_argument("--webhook-configuration",
                   help="ValidatingWebhookConfiguration whose caBundle the controller keeps filled")
    g.add_argument("--webhook-cert-manager", action="store_true",
                   help="cert-manager writes the Secret and caBundle; only read the Secret")


def translate_options(args: argparse.Namespace):
    from platformd.ingress import hostaddrs
    from platformd.ingress.translate import TranslateOptions
    return TranslateOptions(
        controller_class=args.controller_class, ingress_class=args.ingress_class,
        watch_ingress_without_class=args.watch_ingress_without_class,
        default_backend_service=args.default_backend_service,
        default_ssl_certificate=args.default_ssl_certificate,
        allow_snippet_annotations=args.allow_snippet_annotations,
        external_name_services=not args.disable_svc_external_name,
        local_addresses=hostaddrs.read(),
        http_port=args.http_port, https_port=args.https_port,
        enable_ssl_passthrough=args.enable_ssl_passthrough)


def state_dir_of(args: argparse.Namespace) -> Path:
    return (args.state_dir or default_state_dir()).resolve()


class StartError(Exception):
    """Cannot start: reported as one line, exit 1."""

    exit_status = 1


class ConfigError(StartError):
    """Cannot start, and a restart would not help (a missing or bad kubeconfig)."""

    exit_status = EXIT_CONFIG  # the supervisor stops the role at once


@dataclass
class _Parts:
    """Everything ``run`` starts, so ``shutdown`` stops exactly that."""

    controller: object
    plane: object
    server: object
    source: object
    api: object | None = None
    recorder: object | None = None
    elector: object | None = None
    status: object | None = None
    status_runner: object | None = None
    webhook: object | None = None
    gateway_status_runner: object | None = None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from platformd.common import malloctune
    malloctune.tune()  # before the informers' threads allocate: see its docstring
    try:
        from platformd.common import logs
        logs.setup("ingress")
    except Exception:  # noqa: BLE001 - logging set-up must never stop the controller
        logging.basicConfig(level=logging.INFO)
    stop = threading.Event()
    _install_signal_handlers(stop)
    try:
        return run(args, stop)
    except StartError as exc:
        print(f"ingress: {exc}", file=sys.stderr, flush=True)
        return exc.exit_status


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def make_source(args: argparse.Namespace):
    """(source, api_client or None). Raises ``StartError``."""
    if args.source:
        if not os.path.isdir(args.source):
            raise StartError(f"--source {args.source} is not a directory")
        from platformd.common.filesource import FileSource
        return FileSource(args.source), None
    from platformd.common import errors, kubeclient
    from platformd.common.apisource import ApiSource
    try:
        api = kubeclient.load(args.kubeconfig)
        kubeclient.check_reachable(api)
    except errors.KubeConfigError as exc:
        raise ConfigError(_one_line(exc)) from None
    except errors.ApiError as exc:
        raise StartError(_one_line(exc)) from None
    return ApiSource(api), api


def make_dataplane(args: argparse.Namespace, registry):
    from platformd import paths
    from platformd.ingress.dataplane import DataPlane
    from platformd.ingress.luaclient import LuaClient
    from platformd.ingress.nginx import NginxError, NginxFiles, NginxProcess, ensure_default_certificate
    from platformd.ingress.view import RuntimePaths

    state_dir = state_dir_of(args)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        if args.external_nginx:
            # ``platformd nginx`` makes the certificate before nginx starts; making it
            # here too would race with it (two openssl runs writing the same files).
            cert, key = state_dir / "certs" / "default.crt", state_dir / "certs" / "default.key"
        else:
            cert, key = ensure_default_certificate(state_dir / "certs")
        NginxFiles(state_dir).prepare()  # the socket's directory is private, or we do not start
    except (OSError, NginxError) as exc:
        raise StartError(f"cannot prepare state dir {state_dir}: {_one_line(exc)}") from None
    runtime = RuntimePaths(state_dir, paths.lua_dir(), cert, key)
    if len(str(runtime.socket).encode()) > 100:
        raise StartError(f"--state-dir {state_dir} is too long for a unix socket path")
    nginx = NginxProcess(NginxFiles(state_dir), timeouts=NGINX_TIMEOUTS)
    return DataPlane(nginx, LuaClient(runtime.socket), runtime, registry, start_nginx=not args.external_nginx,
                     min_reload_interval=1.0 / args.sync_rate_limit)


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    """Run the controller until ``stop`` is set. Raises ``StartError``."""
    from prometheus_client import CollectorRegistry

    from platformd.common.informer import InformerFactory, drop_field_management
    from platformd.ingress.controller import Controller, ControllerOptions
    from platformd.ingress.metrics import ControllerMetrics
    from platformd.ingress.server import InternalServer, nginx_check, nginx_master_check

    source, api = make_source(args)
    registry = CollectorRegistry()
    plane = make_dataplane(args, registry)
    metrics = ControllerMetrics(registry)
    # The controller only reads objects and writes status with merge patches:
    # apply bookkeeping (often as large as the rest of an object) is dropped.
    factory = InformerFactory(source, namespace=args.watch_namespace, transform=drop_field_management)
    configmap_factory = None
    if args.configmap and args.watch_namespace and args.configmap.split("/")[0] != args.watch_namespace:
        configmap_factory = InformerFactory(source, namespace=args.configmap.split("/")[0],
                                            transform=drop_field_management)
    recorder = None
    if api is not None:
        from platformd.common.events import EventRecorder
        recorder = EventRecorder(api, COMPONENT, host=_node_name())
    options = ControllerOptions(translate=translate_options(args), configmap=args.configmap,
                                min_sync_interval=1.0 / args.sync_rate_limit)
    parts = _Parts(controller=None, plane=plane, server=None, source=source, api=api, recorder=recorder)
    status_runner_ref: list = []

    def on_synced(_translation) -> None:
        if status_runner_ref:
            status_runner_ref[0].run()

    from platformd.ingress import gateway_setup
    controller_plane = gateway_setup.wrap_plane(args, plane)  # merges the served Gateway routes in
    controller = Controller(factory, controller_plane, options, recorder=recorder, configmap_factory=configmap_factory,
                            on_synced=on_synced, metrics=metrics, caches=plane.caches)
    parts.controller = controller
    checks = [nginx_master_check(plane.nginx), nginx_check(plane.runtime.socket)]
    if args.validating_webhook:
        from platformd.ingress import webhook
        try:
            parts.webhook = webhook.start(args, api, controller, stop)
        except webhook.StartFailed as exc:
            raise StartError(f"admission webhook: {exc}") from None
        checks.append(parts.webhook.health)
    try:
        server = InternalServer(args.healthz_host, args.healthz_port, controller, registry, checks=tuple(checks))
    except OSError as exc:
        raise StartError(f"cannot listen on {args.healthz_host}:{args.healthz_port}: {exc.strerror or exc}") from None
    parts.server = server
    try:
        gateway = gateway_setup.create(args, source, api, InformerFactory, controller,
                                       lambda: gateway_setup.publish_addresses_of(args, parts.status),
                                       plane=controller_plane)
    except ValueError as exc:
        raise StartError(str(exc)) from None
    if gateway is not None:
        server.extra_status["gateway_api"] = gateway.summary
        if parts.webhook is not None:
            from platformd.ingress import webhook_routes
            parts.webhook.add_reviewers(webhook_routes.reviewers(gateway))
    server.start()

    # The elector and the status writer outlive ``stop`` until the status is
    # cleared on shutdown: only a leader may write it.
    late_stop = threading.Event()
    threads = [threading.Thread(target=_watch_nginx, args=(controller, plane, stop, args.external_nginx),
                                name="nginx-watch", daemon=True)]
    if api is not None:
        _setup_status(args, api, controller, metrics, parts, stop)
        status_runner_ref.append(parts.status_runner)
        threads.append(threading.Thread(target=parts.elector.run, args=(late_stop,), name="leader-election",
                                        daemon=True))
        threads.append(threading.Thread(target=parts.status_runner.loop, args=(late_stop,), name="status",
                                        daemon=True))
        if gateway is not None:
            parts.gateway_status_runner, _writer = gateway_setup.status_runner(args, api, gateway,
                                                                               parts.elector.is_leader)
            threads.append(threading.Thread(target=parts.gateway_status_runner.loop, args=(late_stop,),
                                            name="gateway-status", daemon=True))
    if gateway is not None:
        threads.append(threading.Thread(target=gateway.run, args=(stop,), name="gateway-sync", daemon=True))
    for thread in threads:
        thread.start()
    log.info("ingress controller starting (class %s, controller %s, %s)", args.ingress_class,
             args.controller_class, f"source {args.source}" if args.source else "API server")
    try:
        controller.run(stop)
    finally:
        stop.set()
        shutdown(args, parts, threads, late_stop)
        if configmap_factory is not None:
            configmap_factory.stop()
    return 0


def _watch_nginx(controller, plane, stop: threading.Event, external: bool) -> None:
    """Re-push dynamic state to a new master; ask for a sync when ours is gone."""
    while not stop.wait(NGINX_CHECK_INTERVAL):
        try:
            plane.check()
            master = plane.nginx.master_pid()
            if not external and controller.state.applied and master is None:
                log.warning("nginx is not running; the next sync starts it")
                controller.trigger()
            elif external and master is not None and controller.state.last_result != "ok":
                controller.trigger()  # the supervisor's nginx is up: retry now, not after the backoff
        except Exception:  # noqa: BLE001 - the watcher must outlive any one failure
            log.exception("nginx check failed")


def _node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname().lower()


def _setup_status(args, api, controller, metrics, parts: _Parts, stop: threading.Event) -> None:
    from platformd.common import errors, kubeclient
    from platformd.common.leaderelection import LeaderElector
    from platformd.common.runner import BoundedFrequencyRunner
    from platformd.ingress.status import StatusOptions, StatusWriter

    def get_service(key: str):
        obj = controller.services.store.get(key)
        if obj is not None:
            return obj
        namespace, _, name = key.partition("/")
        try:
            return kubeclient.request_json(api, "GET", f"/api/v1/namespaces/{namespace}/services/{name}", timeout=10.0)
        except errors.ApiError:
            return None

    def get_node(name: str):
        try:
            return kubeclient.request_json(api, "GET", f"/api/v1/nodes/{name}", timeout=10.0)
        except errors.ApiError:
            return None

    def owned():
        translation = controller.translation
        return translation.owned_ingresses if translation is not None else ()

    namespace = os.environ.get("POD_NAMESPACE") or args.watch_namespace or "default"
    # Without POD_NAME (not in a pod) a random suffix keeps two controllers in
    # one process (tests) from sharing an identity and both leading.
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def leading(value: bool):
        def callback() -> None:
            metrics.set_leader(args.election_id, value)
            if value and parts.status_runner is not None:
                parts.status_runner.run()
            if value and parts.gateway_status_runner is not None:
                parts.gateway_status_runner.run()
        return callback

    elector = LeaderElector(api, namespace, args.election_id, identity,
                            on_started_leading=leading(True), on_stopped_leading=leading(False))
    status = StatusWriter(api, StatusOptions(args.publish_service, args.publish_status_address, _node_name()),
                          is_leader=elector.is_leader, owned=owned, get_ingress=controller.ingresses.store.get,
                          get_service=get_service, get_node=get_node)
    parts.elector, parts.status = elector, status
    parts.status_runner = BoundedFrequencyRunner("ingress-status", status.sync, 1.0, STATUS_RESYNC, 5.0)


def shutdown(args, parts: _Parts, threads: list[threading.Thread], late_stop: threading.Event) -> None:
    log.info("ingress controller stopping")
    if args.update_status_on_shutdown and parts.status is not None:
        try:
            parts.status.clear()
        except Exception:  # noqa: BLE001 - best effort on the way out
            log.exception("clearing the Ingress status failed")
    late_stop.set()
    for thread in threads:
        thread.join(timeout=5)  # the elector releases the Lease on its way out
    if parts.recorder is not None:
        parts.recorder.stop(timeout=2)
    parts.controller.factory.stop()
    if not args.external_nginx:
        parts.plane.nginx.stop()
    parts.plane.lua.close()
    parts.server.stop()
    if parts.webhook is not None:
        parts.webhook.stop()
    close = getattr(parts.source, "close", None)
    if close:
        close()


def _install_signal_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())


if __name__ == "__main__":
    sys.exit(main())
