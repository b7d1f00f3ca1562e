"""Our small exception hierarchy for talking to the Kubernetes API.

Adapters (``apisource``, ``kubeclient``, and anything else that sends HTTP to
the API server) translate urllib3 exceptions, ``kubernetes.client`` exceptions
and error responses into these classes at the boundary. Callers then decide
per class, never per status code or library exception:

- ``ApiUnreachable``, ``ServerError``, ``TooManyRequests``: transient; back off
  and retry (``TooManyRequests.retry_after`` is a lower bound for the delay).
- ``ResourceExpired``: the resourceVersion or continue token we sent is too
  old; start over with a fresh list. Not a failure of the server.
  ``ResourceVersionTooLarge`` (a ``ServerError``): the watch cache has not
  reached the version we sent; a list from etcd gets past it.
- ``AccessDenied``: our credentials or RBAC are wrong; retrying quietly hides
  a configuration problem, so log it loudly (and still back off).
- ``NotFound``, ``Conflict``, ``ClientError``: the request itself was wrong
  for the current state; the caller knows what to do.
- ``KubeConfigError``: we could not even build a client; stop with its
  one-line message and exit ``EXIT_CONFIG``.

Every message is one line so it reads well in logs and on a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping


#: Exit status of a program whose configuration is wrong in a way a restart
#: cannot fix (sysexits' EX_CONFIG). ``platformd --role`` stops the whole role
#: at once on it instead of restarting the program through its retries.
EXIT_CONFIG = 78


class KubeConfigError(Exception):
    """The client configuration (kubeconfig, in-cluster files) is missing or invalid."""


class ApiError(Exception):
    """A request to the API server did not succeed."""


class ApiUnreachable(ApiError):
    """No HTTP answer: connection refused or reset, timeout, TLS or DNS failure."""


class InvalidResponse(ApiError):
    """The server answered 2xx but the body was not what the API promises
    (not JSON, or a watch line that does not parse). Often a proxy in the way."""


class ApiStatusError(ApiError):
    """The server answered with an error status.

    ``status`` is the HTTP status, ``reason`` the Kubernetes ``Status.reason``
    (for example ``Expired``, ``NotFound``) when the body was a Status, and
    ``retry_after`` the seconds from a ``Retry-After`` header (or the
    Status' ``details.retryAfterSeconds``), else None.
    """

    def __init__(self, status: int, message: str, reason: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason or 'error'}: {message}" if message
                         else f"{status} {reason or 'error'}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class ResourceExpired(ApiStatusError):
    """410 Gone: the resourceVersion or continue token is older than the
    server's history. The only correct reaction is a fresh list."""


class TooManyRequests(ApiStatusError):
    """429: the server (priority and fairness) asks us to slow down."""


class ServerError(ApiStatusError):
    """5xx: the server or something in front of it failed."""


class ResourceVersionTooLarge(ServerError):
    """504 with the cause ResourceVersionTooLarge: the server's watch cache has
    not reached the resourceVersion we asked for. Like ``ResourceExpired``, a
    list from etcd (resourceVersion unset) is the way out."""


class AccessDenied(ApiStatusError):
    """401 or 403: bad credentials or missing RBAC permissions."""


class NotFound(ApiStatusError):
    """404."""


class Conflict(ApiStatusError):
    """409: the object changed since we read it, or already exists."""


class ClientError(ApiStatusError):
    """Any other 4xx: the request was malformed or invalid."""


def _class_for(status: int) -> type[ApiStatusError]:
    if status == 410:
        return ResourceExpired
    if status == 429:
        return TooManyRequests
    if status >= 500:
        return ServerError
    if status in (401, 403):
        return AccessDenied
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    return ClientError


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; None if absent or not a number.

    The API server always sends whole seconds; the HTTP-date form is not
    worth supporting here (it would be treated as absent).
    """
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def from_status(status: int, body: bytes | str | Mapping | None = None,
                headers: Mapping[str, str] | None = None) -> ApiStatusError:
    """Build the error for an HTTP error response (or a watch ERROR event).

    ``body`` may be the raw bytes of a ``Status`` object, an already decoded
    ``Status`` dict, or anything else (then only the status code is used).
    """
    status_obj: Mapping | None = None
    if isinstance(body, Mapping):
        status_obj = body
    elif body:
        try:
            decoded = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            decoded = None
        if isinstance(decoded, Mapping):
            status_obj = decoded
    message = ""
    reason = ""
    retry_after = parse_retry_after((headers or {}).get("Retry-After"))
    if status_obj is not None:
        message = str(status_obj.get("message") or "")
        reason = str(status_obj.get("reason") or "")
        details = status_obj.get("details")
        if retry_after is None and isinstance(details, Mapping):
            retry_after = parse_retry_after(str(details.get("retryAfterSeconds") or ""))
    elif isinstance(body, (bytes, str)) and body:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        message = " ".join(text.split())[:200]
    cls = _class_for(status)
    if cls is ServerError and _has_cause(status_obj, "ResourceVersionTooLarge"):
        cls = ResourceVersionTooLarge
    return cls(status, message.replace("\n", " "), reason, retry_after)


def _has_cause(status_obj: Mapping | None, reason: str) -> bool:
    details = status_obj.get("details") if status_obj is not None else None
    causes = details.get("causes") if isinstance(details, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("reason") == reason for c in causes or ())
