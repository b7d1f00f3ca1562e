"""`FakeApiServer`: the fixture's public surface.

It owns the storage (which survives `stop()`/`restart()`, so data and the
resourceVersion counter carry over), the HTTP listener (127.0.0.1, a free
port chosen on the first start and reused by restarts), fault injection,
the request log and, with `rbac=True`, token authentication and RBAC.

The direct methods (`create`, `update`, `delete`, `get`, `list_objects`)
go through the same registry as HTTP requests, so objects seeded by a test
are validated and defaulted exactly like objects a client creates; they
skip authentication, and two conveniences apply (documented per method).
"""

from __future__ import annotations

import base64
import os
import socket
import threading
from http.server import ThreadingHTTPServer

import yaml

from . import resources, schema
from .access import AccessControl
from .errors import ApiError
from .faults import Faults
from .handler import Handler
from .listing import ListOptions
from .rbac import ADMIN_TOKEN
from .registry import SYSTEM_NAMESPACES, Registry
from .resources import ResourceType, resolve
from .storage import Storage, clone
from .tls import serving_cert


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address, api: "FakeApiServer", ssl_context=None):
        self.api = api
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, Handler)
        if ssl_context is not None:
            # The handshake happens on the handler's first read, in its own
            # thread, so a slow client cannot stall the accept loop.
            self.socket = ssl_context.wrap_socket(self.socket, server_side=True,
                                                  do_handshake_on_connect=False)

    def process_request(self, request, client_address):
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FakeApiServer:
    """A Kubernetes API server in a thread, for tests. See docs/architecture.md."""

    def __init__(self, history_limit: int = 1000, rbac: bool = False,
                 bookmark_interval: float = 1.0, port: int = 0, host: str = "127.0.0.1",
                 tls: bool | None = None, namespace_finalize_delay: float = 1.0,
                 gateway_api: bool = True):
        """`rbac=True` authenticates bearer tokens and authorizes with the stored
        RBAC objects. `tls` (default: same as `rbac`) serves https with a
        self-signed certificate, because kubectl sends tokens only over TLS.
        A deleted namespace stays Terminating for `namespace_finalize_delay`
        seconds before its content and itself are removed (see
        `finalize_namespaces()` to do it at once). `gateway_api=False` serves
        a cluster without the Gateway API CRDs (see `set_crds_installed`)."""
        self.crds = resources.ALL_CRDS if gateway_api else frozenset()
        self.storage = Storage(history_limit)
        self.registry = Registry(self.storage, self._schedule_namespace_finalizer)
        self.namespace_finalize_delay = namespace_finalize_delay
        self.faults = Faults(self.storage)
        self.request_log: list[tuple[float, str, str, str, int]] = []
        self.bookmark_interval = bookmark_interval
        self.rbac = rbac
        self.tls = rbac if tls is None else tls
        self._cert = serving_cert() if self.tls else None
        self.host = host
        self.port = port
        self.stopping = False
        self.access = AccessControl(self.storage, self.registry, enabled=rbac)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        for name in SYSTEM_NAMESPACES:
            self.registry.create(resolve("namespaces"), None,
                                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> "FakeApiServer":
        if self._httpd is not None:
            return self
        self.stopping = False
        self._httpd = _HTTPServer((self.host, self.port), self,
                                  self._cert.server_context() if self._cert else None)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fakeapi:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every connection; data is kept."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stopping = True
        self.storage.close_watchers(abrupt=True)
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self) -> None:
        """Like an API server restart: connections drop, data and port stay."""
        self.stop()
        self.start()

    def __enter__(self) -> "FakeApiServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now (to wait for a client's watch)."""
        return self.storage.watcher_count

    @property
    def ca_file(self) -> str | None:
        """The PEM file to trust for this server's https, or None over http."""
        return self._cert.cert_file if self._cert else None

    def write_kubeconfig(self, path, token: str | None = None, namespace: str = "default") -> str:
        """Write a kubeconfig for the `kubernetes` client and kubectl.

        Without `token`, an RBAC-enabled server gets its built-in admin token
        (group system:masters); a server without RBAC gets no credentials.
        """
        if token is None and self.rbac:
            token = ADMIN_TOKEN
        user = {"token": token} if token else {}
        cluster = {"server": self.url}
        if self._cert:
            cluster["certificate-authority-data"] = base64.b64encode(self._cert.pem()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fakeapi", "cluster": cluster}],
            "users": [{"name": "fakeapi", "user": user}],
            "contexts": [{"name": "fakeapi",
                          "context": {"cluster": "fakeapi", "user": "fakeapi", "namespace": namespace}}],
            "current-context": "fakeapi",
        }
        path = os.fspath(path)
        with open(path, "w") as f:
            yaml.safe_dump(config, f, default_flow_style=False)
        return path

    # --- the namespace controller ----------------------------------------------------------

    def _schedule_namespace_finalizer(self, name: str) -> None:
        def run():
            if not self.registry.finalize_namespace(name):
                self._schedule_namespace_finalizer(name)   # finalizers still hold content
        timer = threading.Timer(self.namespace_finalize_delay, run)
        timer.daemon = True
        timer.start()

    def finalize_namespaces(self) -> None:
        """Finish deleting every terminating namespace now (content with
        finalizers is marked for deletion and keeps its namespace alive)."""
        for ns in self.storage.objects(resolve("namespaces")):
            if ns["metadata"].get("deletionTimestamp"):
                self.registry.finalize_namespace(ns["metadata"]["name"])

    # --- authentication / authorization ---------------------------------------------------

    def add_token(self, token: str, user: str, groups: list[str] | tuple[str, ...] = ()) -> None:
        """Make `token` authenticate as `user` in `groups` (with `rbac=True`)."""
        self.access.add_token(token, user, groups)

    def add_service_account_token(self, token: str, namespace: str, name: str) -> None:
        """Make `token` authenticate as ServiceAccount `namespace/name`."""
        self.access.add_service_account_token(token, namespace, name)

    @property
    def denied_requests(self) -> list[dict]:
        """Every request refused by RBAC (403), as dicts of its RBAC attributes."""
        return self.access.denied

    # --- direct access for tests ----------------------------------------------------------

    def set_crds_installed(self, bundle: str, installed: bool) -> None:
        """Install or remove a CRD bundle (e.g. "gateway-api"); objects stay stored."""
        self.crds = self.crds | {bundle} if installed else self.crds - {bundle}

    def _type_of(self, obj: dict) -> ResourceType:
        try:
            rt = resolve(obj["kind"], obj.get("apiVersion"))
        except KeyError as e:
            raise ValueError(f"cannot tell the resource type of {obj.get('kind')!r}: {e}") from None
        if not resources.served(rt, self.crds):
            raise ValueError(f"no matches for kind {obj['kind']!r} in version {obj.get('apiVersion')!r}"
                             " (its CRDs are not installed)")
        return rt

    def create(self, obj: dict) -> dict:
        """Create like POST, with two seeding conveniences: a missing namespace is
        created first, and a given status is kept (POST would reset it)."""
        rt = self._type_of(obj)
        obj = _decoded(rt, obj)
        namespace = (obj.get("metadata") or {}).get("namespace") if rt.namespaced else None
        if rt.namespaced and not namespace:
            namespace = "default"
        if namespace and self.storage.get(resolve("namespaces"), "", namespace) is None:
            self.registry.create(resolve("namespaces"), None,
                                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        return self.registry.create(rt, namespace, obj, keep_status=True)

    def update(self, obj: dict) -> dict:
        """Replace like PUT, except that status is written too (no /status split),
        so tests can set status in one call. A resourceVersion in `obj` is checked."""
        rt = self._type_of(obj)
        obj = _decoded(rt, obj)
        meta = obj.get("metadata") or {}
        return self.registry.update(rt, meta.get("namespace") if rt.namespaced else None,
                                    meta["name"], obj, keep_status=False)

    def delete(self, kind_or_resource: str, namespace: str | None, name: str) -> dict:
        rt = resolve(kind_or_resource)
        return self.registry.delete(rt, namespace if rt.namespaced else None, name)

    def get(self, kind_or_resource: str, namespace: str | None, name: str) -> dict | None:
        """The stored object, or None when there is none."""
        rt = resolve(kind_or_resource)
        try:
            return self.registry.get(rt, namespace if rt.namespaced else None, name)
        except ApiError:
            return None

    def list_objects(self, kind_or_resource: str, namespace: str | None = None) -> list[dict]:
        rt = resolve(kind_or_resource)
        return self.registry.list(rt, ListOptions(namespace=namespace))["items"]

    def load_manifests(self, directory) -> int:
        """Create every object in the YAML files of `directory` (sorted); returns the count."""
        count = 0
        names = sorted(n for n in os.listdir(directory) if n.endswith((".yaml", ".yml", ".json")))
        for name in names:
            with open(os.path.join(directory, name)) as f:
                for doc in yaml.safe_load_all(f):
                    if not doc:
                        continue
                    items = doc.get("items", []) if doc.get("kind", "").endswith("List") else [doc]
                    for item in items:
                        self.create(item)
                        count += 1
        return count


def _decoded(rt: ResourceType, obj: dict) -> dict:
    """A copy of `obj` without the fields a real server would drop on decoding."""
    obj = clone(obj)
    schema.decode(rt, obj, "Ignore")
    return obj
