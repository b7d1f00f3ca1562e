"""A faithful fake Kubernetes API server for tests.

    from tests.fakeapi import FakeApiServer
    srv = FakeApiServer(history_limit=1000).start()     # 127.0.0.1, free port
    srv.write_kubeconfig(path)                          # for `kubernetes` and kubectl
    srv.create(obj) / srv.update(obj) / srv.delete(kind, ns, name)
    srv.get(kind, ns, name) -> dict | None / srv.list_objects(kind, namespace=None)
    srv.faults.drop_watches(abrupt=False) / stall_watches(s) / fail_next(n, status, path_prefix)
    srv.faults.compact() / srv.faults.clear()
    srv.stop(); srv.restart()                           # same port, same data, rv counts on
    srv.request_log                                     # (monotonic, method, path, query, status)
    srv.load_manifests(dir)                             # create every object in dir/*.yaml
    srv.open_watches                                    # watch streams open now

Pytest: the `fake_api` fixture (tests/conftest.py) yields a started server
with `fake_api.kubeconfig` written. Standalone:
`python -m tests.fakeapi --port 0 --kubeconfig FILE [--load DIR] [--rbac]`
(run from the repository root) prints its URL and serves until SIGTERM.

What behaves like the real server (see each module for details):
- one global resourceVersion; uid, creationTimestamp, generation (Ingress,
  IngressClass, EndpointSlice, workloads: bumped by changes outside metadata
  and status); no-op writes keep the rv;
- list: resourceVersion ""/"0"/exact (+ resourceVersionMatch) with the
  watch cache's semantics (``"0"`` and NotOlderThan answered from it, in one
  piece whatever the limit; unset, Exact, or a version with a limit read from
  "etcd" and paged; ``registry.watch_cache = False`` turns it off,
  ``registry.list_reads`` counts both kinds), limit and opaque continue
  tokens (consistent snapshots; 410 Expired when compacted), label and field
  selectors;
- watch: chunked JSON lines, ADDED/MODIFIED/DELETED/BOOKMARK
  (allowWatchBookmarks; every `bookmark_interval` s), timeoutSeconds,
  replay from history, ERROR 410 for a compacted start, objects entering or
  leaving a selector arrive as ADDED/DELETED;
- create (generateName, 409 AlreadyExists, 404 for a missing namespace),
  update (409 Conflict on a stale resourceVersion), merge / JSON /
  strategic-merge patches (merge keys and directives from the schemas),
  server-side apply (with removal of fields the same manager dropped; lists
  atomic, no conflicts), delete (finalizers, preconditions),
  deletecollection, dryRun, /status subresources;
- decoding like Go against the 1.34 OpenAPI schemas (from the
  kubernetes-validate test dependency): unknown fields are dropped with a
  `Warning` header (fieldValidation=Strict: 400), wrong JSON types are 400;
- defaults (Service cluster IP and node ports, Secret stringData, ...), 422
  validation with real messages and causes, Go-like time normalisation;
- Status objects for every error; Table output for kubectl; just enough
  OpenAPI v3 and protobuf request decoding for kubectl;
- core and events.k8s.io Events are one storage;
- a deleted namespace is Terminating (no new content: 403) for
  `namespace_finalize_delay` s, then its content and itself are deleted
  (`srv.finalize_namespaces()` does it at once);
- apps/v1 Deployments/DaemonSets/StatefulSets and policy/v1
  PodDisruptionBudgets are stored (no controllers), so charts apply;
- `FakeApiServer(rbac=True)`: bearer tokens (`add_token`,
  `add_service_account_token`, TokenRequest), RBAC from stored objects,
  impersonation, (Self)SubjectAccessReviews, 403s in `denied_requests`;
  served over https (kubectl only sends tokens over TLS).

Not modelled: controllers and garbage collection (ownerReferences), graceful
pod deletion, protobuf responses, and protobuf bodies other than those
kubectl's imperative commands send for namespaces, configmaps, secrets,
service accounts, RBAC objects, tokens and access reviews (others get 415).
Watch-list (sendInitialEvents) is supported.

Module map: `resources` (types, discovery), `storage` (objects, history,
watchers), `registry` (verb semantics), `defaults`, `validation`, `schema`,
`listing` (options, continue tokens), `selectors`, `patching`, `strategic`,
`apply`, `conversion`, `tables`, `openapi`, `protobuf`, `handler` (HTTP
routing), `watchstream` (one watch response), `faults`, `access` and `rbac`,
`tls`, `server` (the fixture object).
"""

from .errors import ApiError
from .server import FakeApiServer

__all__ = ["ApiError", "FakeApiServer"]
