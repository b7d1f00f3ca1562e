"""A faithful fake Kubernetes API server for tests.

    from tests.fakeapi import FakeApiServer
    srv = FakeApiServer().start()
    srv.write_kubeconfig(path)

Module map: `resources` (types and discovery), `storage` (objects, history,
watchers), `registry` (verb semantics), `validation`, `selectors`,
`patching`, `tables` (kubectl's Table output), `handler` (HTTP), `faults`,
`rbac`, `server` (the fixture object).
"""

from .errors import ApiError
from .server import FakeApiServer

__all__ = ["ApiError", "FakeApiServer"]
