"""Setting up the Kubernetes client, and the one raw HTTP call everything uses.

``load()`` finds the configuration the way controllers do and returns a
``Client``: the ``kubernetes`` library's ``Configuration`` and the urllib3
pool the library builds from it. We use that library only for what it is
good at: kubeconfig parsing, authentication (tokens, client certificates,
exec plugins, token refresh) and TLS. Requests go through ``request()``,
which sends raw HTTP on that pool and hands back bytes or plain JSON, never
OpenAPI model objects (those are several times slower to build and larger
to keep; see ``apisource``). ``request()`` is also the boundary where
transport failures and error responses become ``platformd.common.errors``.
It takes a ``kubernetes.client.ApiClient`` as well (same attributes).

Where the configuration comes from, first match wins:

1. ``kubeconfig`` argument (``--kubeconfig``);
2. the ``KUBECONFIG`` environment variable (a ``:``-separated list, merged);
3. in-cluster: ``KUBERNETES_SERVICE_HOST`` is set (we run in a pod) and the
   service account token is mounted;
4. ``~/.kube/config``.

``context`` selects a kubeconfig context; it is an error with in-cluster
configuration, which has none.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import warnings
from collections.abc import Mapping, Sequence
from urllib.parse import quote

import urllib3
import yaml

from platformd.common import errors, kubelib
from platformd.common.errors import KubeConfigError
from platformd.common.kubelib import ConfigException, Configuration, InClusterConfigLoader, RESTClientObject

log = logging.getLogger(__name__)

__all__ = ["Client", "KubeConfigError", "load", "check_reachable", "request", "request_json",
           "describe_transport_error"]

# Where a pod finds its service account (module constants so tests can point elsewhere).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
DEFAULT_KUBECONFIG = "~/.kube/config"

# connect: an API server that does not accept a TCP connection in 10 s is down
# for our purposes; read: a list page of 500 objects takes well under 60 s.
DEFAULT_TIMEOUT = urllib3.Timeout(connect=10.0, read=60.0)


# ---------------------------------------------------------------- configuration


class Client:
    """The part of ``kubernetes.client.ApiClient`` we use: ``configuration``
    (host, TLS files, the token and its refresh hook), ``rest_client`` (the
    library's ``RESTClientObject``: the urllib3 pool it sets up from the
    configuration, as ApiClient does) and ``default_headers``.

    Why not ApiClient itself: it exists to turn OpenAPI models into requests
    and answers into models, which we never do, and importing it imports
    pydantic (its response model), dateutil and multiprocessing.pool: in a pod
    (in-cluster configuration) that was 6.5 MiB of the 7.6 MiB (tracemalloc)
    and 16 MB of the 18 MB RSS the library cost (see ``kubelib``). With a
    kubeconfig the library's loader imports ApiClient anyway.
    """

    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        self.rest_client = RESTClientObject(configuration)
        # The User-Agent ApiClient sends (the API server names field managers after it).
        self.default_headers = {"User-Agent": f"OpenAPI-Generator/{kubelib.client.__version__}/python"}

    def close(self) -> None:
        """Close the pool's connections (as ``ApiClient.close``)."""
        self.rest_client.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(kubeconfig: str | None = None, context: str | None = None) -> Client:
    """Build a ``Client`` from the first configuration found (see module docstring).

    Raises ``KubeConfigError`` with a one-line message naming the file and
    the problem when the configuration is missing or invalid.
    """
    configuration = Configuration()
    if kubeconfig:
        _load_kubeconfig(kubeconfig, context, configuration, origin="--kubeconfig")
    elif os.environ.get("KUBECONFIG"):
        _load_kubeconfig(os.environ["KUBECONFIG"], context, configuration, origin="KUBECONFIG")
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context:
            raise KubeConfigError(f"context {context!r} needs a kubeconfig, but none was given "
                                  "and we run in-cluster")
        _load_in_cluster(configuration)
    elif os.path.exists(os.path.expanduser(DEFAULT_KUBECONFIG)):
        _load_kubeconfig(DEFAULT_KUBECONFIG, context, configuration, origin="default")
    else:
        raise KubeConfigError(
            "no Kubernetes configuration: --kubeconfig not given, KUBECONFIG not set, "
            f"not in a cluster (KUBERNETES_SERVICE_HOST not set) and {DEFAULT_KUBECONFIG} does not exist")
    if not configuration.verify_ssl and configuration.host.startswith("https:"):
        _warn_unverified(configuration.host)
    return Client(configuration)


def _warn_unverified(host: str) -> None:
    """``insecure-skip-tls-verify``: say so once, here, instead of urllib3's
    two-line ``InsecureRequestWarning`` on every request (80-205 per
    conformance run). The choice is the kubeconfig's; repeating it per
    request only buries the other log lines."""
    log.warning("TLS certificate of the API server at %s is not verified (insecure-skip-tls-verify in the "
                "kubeconfig): anyone on the path can impersonate it", host)
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)


def _load_in_cluster(configuration: Configuration) -> None:
    if not os.path.isfile(SERVICE_ACCOUNT_TOKEN):
        raise KubeConfigError(
            f"in-cluster configuration: service account token {SERVICE_ACCOUNT_TOKEN} is missing "
            "(is automountServiceAccountToken false?)")
    try:
        # try_refresh_token: bound service account tokens rotate; re-read the file.
        InClusterConfigLoader(SERVICE_ACCOUNT_TOKEN, SERVICE_ACCOUNT_CA,
                              try_refresh_token=True).load_and_set(configuration)
    except (ConfigException, OSError) as exc:
        raise KubeConfigError(f"in-cluster configuration: {_one_line(exc)}") from None


def _load_kubeconfig(paths: str, context: str | None, configuration: Configuration,
                     origin: str) -> None:
    files = [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]
    existing = [p for p in files if os.path.exists(p)]
    if not existing:
        where = f"KUBECONFIG={paths}" if origin == "KUBECONFIG" else f"kubeconfig {paths}"
        raise KubeConfigError(f"{where}: no such file")
    contexts: list[str] = []
    current = None
    for path in existing:
        doc = _read_kubeconfig(path)
        for entry in doc.get("contexts") or ():
            if isinstance(entry, Mapping) and entry.get("name") not in contexts:
                contexts.append(str(entry.get("name")))
        current = current or doc.get("current-context")
    label = f"kubeconfig {':'.join(existing)}"
    wanted = context or current
    if not wanted:
        raise KubeConfigError(f"{label}: no current-context set and no --context given "
                              f"(contexts: {', '.join(contexts) or 'none'})")
    if wanted not in contexts:
        raise KubeConfigError(f"{label}: context {wanted!r} not found "
                              f"(contexts: {', '.join(contexts) or 'none'})")
    try:
        kubelib.load_kube_config(config_file=os.pathsep.join(existing), context=wanted,
                                 client_configuration=configuration, persist_config=False)
    except Exception as exc:  # the loader raises ConfigException, KeyError, ValueError, ...
        raise KubeConfigError(f"{label}: context {wanted!r}: {_one_line(exc)}") from None


def _read_kubeconfig(path: str) -> Mapping:
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc.strerror or _one_line(exc)}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or _one_line(exc)
        raise KubeConfigError(f"kubeconfig {where}: invalid YAML: {problem}") from None
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (expected a mapping with "
                              "clusters, users and contexts)")
    return doc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# ---------------------------------------------------------------- raw HTTP


def request(api_client: Client, method: str, path: str, *,
            query: Sequence[tuple[str, str]] | Mapping[str, str] | None = None,
            body: bytes | Mapping | list | None = None,
            content_type: str = "application/json",
            timeout: urllib3.Timeout | float = DEFAULT_TIMEOUT) -> urllib3.BaseHTTPResponse:
    """Send one request; return the response with its body **not yet read**.

    The caller reads it (``.read()``, ``.read1()``) and must ``close()`` it.
    Non-2xx answers are read, released and raised as ``errors.ApiStatusError``
    subclasses; transport failures as ``errors.ApiUnreachable``. urllib3's own
    retries are off: every caller has its own backoff, and hidden retries
    would multiply the load on a struggling API server.
    """
    query_params = list(query.items()) if isinstance(query, Mapping) else list(query or ())
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
    url = _url(api_client.configuration.host, path, query_params)
    headers = {**api_client.default_headers, **headers}
    # The configuration's own authentication (as ApiClient.param_serialize
    # applies it): the bearer token, refreshed by its hook when it has one.
    token = api_client.configuration.auth_settings().get("BearerToken")
    if token and token["value"]:
        headers[token["key"]] = token["value"]
    pool = api_client.rest_client.pool_manager
    try:
        response = pool.request(method, url, body=body, headers=headers, timeout=timeout,
                                preload_content=False, retries=False, redirect=False)
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        raise errors.ApiUnreachable(f"{method} {url}: {describe_transport_error(exc)}") from exc
    if response.status >= 300:
        try:
            data = response.read()
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError):
            data = b""
        finally:
            response.release_conn()
        raise errors.from_status(response.status, data, response.headers)
    return response


def _url(host: str, path: str, query: Sequence[tuple[str, str]]) -> str:
    """``host`` + ``path`` + the query, encoded as ApiClient encodes it."""
    if not query:
        return host + path
    return host + path + "?" + "&".join(f"{key}={quote(str(value))}" for key, value in query)


def request_json(api_client: Client, method: str, path: str, *,
                 query: Sequence[tuple[str, str]] | Mapping[str, str] | None = None,
                 body: bytes | Mapping | list | None = None,
                 content_type: str = "application/json",
                 timeout: urllib3.Timeout | float = DEFAULT_TIMEOUT) -> dict:
    """``request()`` and parse the answer: a plain dict (``{}`` for an empty body)."""
    response = request(api_client, method, path, query=query, body=body,
                       content_type=content_type, timeout=timeout)
    try:
        data = response.read()
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        raise errors.ApiUnreachable(f"{method} {path}: {describe_transport_error(exc)}") from exc
    finally:
        response.release_conn()
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError as exc:
        raise errors.InvalidResponse(f"{method} {path}: answer is not JSON ({exc})") from None


def check_reachable(api_client: Client, timeout: float = 5.0) -> dict:
    """Ask the API server for ``/version``; returns it (``gitVersion`` etc.).

    Raises ``errors.ApiUnreachable`` (or another ``errors.ApiError``) whose
    message is one line naming the server and the problem, e.g.
    ``cannot reach the API server at https://10.0.0.1:6443: connection refused``.
    """
    host = api_client.configuration.host
    try:
        return request_json(api_client, "GET", "/version",
                            timeout=urllib3.Timeout(connect=timeout, read=timeout))
    except errors.ApiUnreachable as exc:
        reason = describe_transport_error(exc.__cause__) if exc.__cause__ else str(exc)
        raise errors.ApiUnreachable(f"cannot reach the API server at {host}: {reason}") from None
    except errors.ApiStatusError as exc:
        raise type(exc)(exc.status, f"the API server at {host} refused /version: {exc.message}",
                        exc.reason, exc.retry_after) from None


def describe_transport_error(exc: BaseException) -> str:
    """A short, one-line reason for a transport failure ("connection refused").

    urllib3 wraps the interesting OS error two or three levels deep, behind
    messages that include object reprs; dig it out.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else (current.__cause__ or current.__context__)
    for e in chain:
        if isinstance(e, (ssl.SSLError, urllib3.exceptions.SSLError)):
            return f"TLS error: {_one_line(e)}"
    for e in chain:
        if isinstance(e, urllib3.exceptions.NameResolutionError):
            return f"cannot resolve host {e.conn.host!r}" if getattr(e, "conn", None) else "cannot resolve host"
        if isinstance(e, OSError) and not isinstance(e, urllib3.exceptions.HTTPError) and e.strerror:
            return e.strerror[:1].lower() + e.strerror[1:]
    for e in chain:
        if isinstance(e, (TimeoutError, urllib3.exceptions.TimeoutError)):
            return "timed out"
    for e in chain:
        if isinstance(e, urllib3.exceptions.ProtocolError) or isinstance(e, http.client.HTTPException):
            return f"connection broken ({type(e).__name__})"
    return _one_line(exc)
