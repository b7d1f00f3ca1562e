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

Pytest: the `fake_api` fixture (tests/conftest.py) yields a started server
with `fake_api.kubeconfig` written. Standalone:
`python -m tests.fakeapi --port 0 --kubeconfig FILE [--load DIR] [--rbac]`
(run from the repository root) prints its URL and serves until SIGTERM.

What behaves like the real server (see each module for details):
- one global resourceVersion; uid, creationTimestamp, generation (Ingress,
  IngressClass: bumped by spec changes); no-op writes keep the rv;
- list: resourceVersion ""/"0"/exact (+ resourceVersionMatch), limit and
  opaque continue tokens (consistent snapshots; 410 Expired when compacted),
  label and field selectors;
- watch: chunked JSON lines, ADDED/MODIFIED/DELETED/BOOKMARK
  (allowWatchBookmarks; every `bookmark_interval` s), timeoutSeconds,
  replay from history, ERROR 410 for a compacted start, objects entering or
  leaving a selector arrive as ADDED/DELETED;
- create (generateName, 409 AlreadyExists, 404 for a missing namespace),
  update (409 Conflict on a stale resourceVersion), merge / JSON /
  strategic-merge (as merge) patches, server-side apply (with removal of
  fields the same manager dropped), delete (finalizers, preconditions),
  deletecollection, dryRun, /status subresources;
- defaults (Service cluster IP and node ports, Secret stringData, ...), 422
  validation with real messages and causes, Go-like time normalisation;
- Status objects for every error; Table output for kubectl; just enough
  OpenAPI v3 and protobuf request decoding for kubectl;
- core and events.k8s.io Events are one storage;
- `FakeApiServer(rbac=True)`: bearer tokens (`add_token`,
  `add_service_account_token`, TokenRequest), RBAC from stored objects,
  impersonation, (Self)SubjectAccessReviews, 403s in `denied_requests`;
  served over https (kubectl only sends tokens over TLS).

Not modelled: garbage collection (ownerReferences), graceful pod deletion,
namespace Terminating phase (deletion is immediate), apply conflicts and
list-merge keys, fieldValidation=Strict (unknown fields are kept), protobuf
responses, watch-list (sendInitialEvents).

Module map: `resources` (types, discovery), `storage` (objects, history,
watchers), `registry` (verb semantics), `validation`, `selectors`,
`patching`, `apply`, `conversion`, `tables`, `openapi`, `protobuf`,
`handler` (HTTP), `faults`, `rbac`, `tls`, `server` (the fixture object).
"""

from .errors import ApiError
from .server import FakeApiServer

__all__ = ["ApiError", "FakeApiServer"]
