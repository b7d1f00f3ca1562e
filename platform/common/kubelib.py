"""The ``kubernetes`` client library, imported for the parts the project uses.

Import the library's names from here (``Configuration``,
``RESTClientObject``, ``InClusterConfigLoader``, ``ConfigException``,
``load_kube_config``, ``client`` for the generated models), never from
``kubernetes`` directly in ``platformd`` code.

Why: importing any part of the library runs ``kubernetes/__init__.py``
first, which imports every subpackage: ``dynamic`` (with
kubernetes_validate and jsonschema), ``watch``, ``stream`` (websocket),
``utils`` (create_from_yaml, metrics), ``leaderelection``, ``informer``, and
``config``, whose own ``__init__`` imports the kubeconfig loader (oauthlib,
requests_oauthlib, requests, google-auth when installed). The controllers
use Configuration (with its authentication), the urllib3 pool the library
builds from it (``RESTClientObject``; see ``kubeclient.Client``), the
in-cluster loader, and the kubeconfig loader only when a kubeconfig is
given. Measured in a fresh process that has imported the controller's other
libraries (tracemalloc / RSS growth): the whole package 14.0 MiB / 33.7 MB;
what a pod uses (in-cluster) 1.1 MiB / 2.2 MB (with ``ApiClient``, which
brings pydantic, dateutil and multiprocessing.pool, 7.6 MiB / 18.2 MB); with
a kubeconfig 10.9 MiB / 27.2 MB (its loader imports ``ApiClient`` itself).

How: ``kubernetes``, ``kubernetes.config`` and ``kubernetes.utils`` are
registered *deferred* before the first import (``_defer``): each is the
package's real module (its spec and ``__path__``), so its submodules import
as usual, but its ``__init__`` runs only when someone reads a name that no
submodule has set (``kubernetes.__version__``, ``kubernetes.watch``,
``kubernetes.config.load_kube_config``: PEP 562 ``__getattr__``). Code that
wants the whole library (tests, tools) gets all of it, unchanged: nothing of
the library is copied or patched. ``kubernetes.client``'s own ``__init__``
already loads its models and API classes on first use. If the library was
imported before this module, there is nothing to save and nothing is done.
"""

from __future__ import annotations

import importlib.util
import sys
import threading

__all__ = ["ConfigException", "Configuration", "InClusterConfigLoader", "RESTClientObject", "client",
           "load_kube_config", "DEFERRED"]

#: The packages whose ``__init__`` imports more than we use, outermost first.
DEFERRED = ("kubernetes", "kubernetes.config", "kubernetes.utils")

_lock = threading.RLock()  # one package __init__ at a time
# Dunder names a package __init__ defines; other dunder reads (tools probing
# a module for ``__wrapped__`` and the like) do not run it.
_INIT_DUNDERS = frozenset({"__version__", "__project__", "__all__"})


def _defer(name: str) -> None:
    """Register package ``name`` with its ``__init__`` deferred (see the module docstring)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not an installed package: the usual import gives the usual error
    module = importlib.util.module_from_spec(spec)
    state = {"ran": False}

    def __getattr__(attr: str):  # noqa: N807 - PEP 562 hook
        if attr.startswith("__") and attr.endswith("__") and attr not in _INIT_DUNDERS:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        with _lock:
            if not state["ran"]:
                state["ran"] = True
                del module.__dict__["__getattr__"]
                spec.loader.exec_module(module)  # the package's own __init__, in its own module
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__getattr__ = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _deferred_all() -> None:
    with _lock:
        for name in DEFERRED:
            _defer(name)


_deferred_all()

# ``import a.b`` (not ``from a import b``, which probes ``a.b`` as an
# attribute first and so would run the deferred __init__).
import kubernetes.client  # noqa: E402 - after the deferral above, which is why this module exists
from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.rest import RESTClientObject  # noqa: E402
from kubernetes.config.config_exception import ConfigException  # noqa: E402
from kubernetes.config.incluster_config import InClusterConfigLoader  # noqa: E402

client = kubernetes.client


def load_kube_config(**kwargs) -> None:
    """``kubernetes.config.kube_config.load_kube_config``, imported on first use (see above)."""
    from kubernetes.config.kube_config import load_kube_config as load

    load(**kwargs)


