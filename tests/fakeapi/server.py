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
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

import yaml

from .errors import ApiError, forbidden
from .faults import Faults
from .handler import Handler
from . import rbac as rbac_rules
from .rbac import ADMIN_TOKEN, Attributes, Authenticator, Authorizer, UserInfo, service_account_user
from .registry import SYSTEM_NAMESPACES, ListOptions, Registry
from .resources import ResourceType, resolve
from .storage import Storage
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
                 tls: bool | None = None):
        """`rbac=True` authenticates bearer tokens and authorizes with the stored
        RBAC objects. `tls` (default: same as `rbac`) serves https with a
        self-signed certificate, because kubectl sends tokens only over TLS."""
        self.storage = Storage(history_limit)
        self.registry = Registry(self.storage)
        self.faults = Faults(self.storage)
        self.request_log: list[tuple[float, str, str, str, int]] = []
        self.denied_requests: list[dict] = []
        self.bookmark_interval = bookmark_interval
        self.rbac = rbac
        self.tls = rbac if tls is None else tls
        self._cert = serving_cert() if self.tls else None
        self.host = host
        self.port = port
        self.stopping = False
        self._authenticator = Authenticator()
        self._authorizer = Authorizer(self.storage)
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

    # --- authentication / authorization ---------------------------------------------------

    def add_token(self, token: str, user: str, groups: list[str] | tuple[str, ...] = ()) -> None:
        self._authenticator.add_token(token, user, groups)

    def add_service_account_token(self, token: str, namespace: str, name: str) -> None:
        user, groups = service_account_user(namespace, name)
        self.add_token(token, user, groups)

    def authenticate(self, authorization: str | None) -> UserInfo | None:
        if not self.rbac:
            return UserInfo("fakeapi-admin", ("system:masters", "system:authenticated"))
        return self._authenticator.authenticate(authorization)

    def impersonate(self, user: UserInfo, target: str | None, groups: list[str], path: str) -> UserInfo:
        """Apply Impersonate-User/-Group headers (`kubectl --as`), if allowed."""
        if not target:
            if groups:
                raise ApiError(500, "InternalError", "Internal error occurred: requested "
                               f"impersonation of groups {groups} without impersonating a user")
            return user
        for attrs in rbac_rules.impersonation_checks(user, target, groups):
            if self.rbac and not self._authorizer.allowed(attrs):
                self._record_denied(attrs, "IMPERSONATE", path)
                raise forbidden(user.name, "impersonate", _Named(attrs.resource, ""), "",
                                attrs.name, attrs.namespace or None)
        return rbac_rules.impersonated(target, groups)

    def review(self, rt: ResourceType, body: dict, user: UserInfo) -> dict:
        """Answer a SelfSubjectAccessReview (about `user`) or SubjectAccessReview."""
        body = body if isinstance(body, dict) else {}
        spec = dict(body.get("spec") or {})
        if rt.kind == "SubjectAccessReview":
            subject = UserInfo(spec.get("user", ""), tuple(spec.get("groups") or ()))
        else:
            subject = user
        attrs = rbac_rules.review_attributes(subject, spec)
        allowed = not self.rbac or self._authorizer.allowed(attrs)
        status = {"allowed": allowed}
        if allowed:
            status["reason"] = "allowed by the fake API server's RBAC" if self.rbac else "RBAC disabled"
        return {"kind": rt.kind, "apiVersion": rt.api_version,
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def issue_token(self, namespace: str, name: str, body: dict) -> dict:
        """TokenRequest for a ServiceAccount (`kubectl create token`)."""
        self.registry.get(resolve("serviceaccounts"), namespace, name)   # 404 if missing
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        spec.setdefault("audiences", ["https://kubernetes.default.svc"])
        spec.setdefault("expirationSeconds", 3600)
        token = f"fakeapi-sa-{secrets.token_hex(16)}"
        self.add_service_account_token(token, namespace, name)
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + spec["expirationSeconds"]))
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
                "spec": spec, "status": {"token": token, "expirationTimestamp": expires}}

    def _record_denied(self, attrs: Attributes, method: str, path: str) -> None:
        self.denied_requests.append({
            "user": attrs.user.name, "groups": list(attrs.user.groups), "verb": attrs.verb,
            "group": attrs.group, "resource": attrs.resource, "subresource": attrs.subresource,
            "namespace": attrs.namespace, "name": attrs.name, "method": method, "path": path})

    def authorize(self, attrs: Attributes, method: str, path: str) -> None:
        if not self.rbac or self._authorizer.allowed(attrs):
            return
        self._record_denied(attrs, method, path)
        if not attrs.is_resource:
            raise ApiError(403, "Forbidden", f'forbidden: User "{attrs.user.name}" cannot get path "{attrs.path}"')
        raise forbidden(attrs.user.name, attrs.verb, resolve(attrs.resource, _api_version(attrs.group)),
                        attrs.subresource, attrs.name or None, attrs.namespace or None)

    # --- direct access for tests ----------------------------------------------------------

    @staticmethod
    def _type_of(obj: dict) -> ResourceType:
        try:
            return resolve(obj["kind"], obj.get("apiVersion"))
        except KeyError as e:
            raise ValueError(f"cannot tell the resource type of {obj.get('kind')!r}: {e}") from None

    def create(self, obj: dict) -> dict:
        """Create like POST, with two seeding conveniences: a missing namespace is
        created first, and a given status is kept (POST would reset it)."""
        rt = self._type_of(obj)
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


@dataclass(frozen=True)
class _Named:
    """A resource known only by name, for error messages about users/groups."""
    plural: str
    group: str


def _api_version(group: str) -> str:
    return f"{group}/v1" if group else "v1"
