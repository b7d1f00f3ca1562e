"""The ValidatingAdmissionWebhook admission plugin: writes are sent to the
webhooks of the stored ValidatingWebhookConfigurations before they are stored.

Like the real server, for each webhook whose rules, namespaceSelector and
objectSelector match the write (configurations by name, webhooks in order):

* an ``admission.k8s.io/v1`` AdmissionReview is POSTed over TLS, trusting
  only the webhook's ``caBundle`` and checking the certificate for
  ``<service>.<namespace>.svc``, with ``?timeout=<timeoutSeconds>s``;
* a Service reference needs the Service with that port to exist, and is
  dialled at the loopback address a test gives in ``service_routes`` (the
  fake has no cluster network, and real EndpointSlices may not hold loopback
  addresses); a ``url`` must be loopback too;
* a denial fails the write with the webhook's status code (403 when it gives
  none) and ``admission webhook "<name>" denied the request: <message>``;
* a webhook that cannot be called or answers nonsense fails the write with
  500 under ``failurePolicy: Fail`` (the default) and is skipped under
  ``Ignore``.

Warnings are not sent as ``Warning`` headers (the fake's handler has no way
to add them): they are kept in ``warnings`` for tests to read. Writes to
admissionregistration objects are never sent to webhooks (as in the real
server, so a broken webhook cannot lock itself in).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import socket
import ssl
import uuid
from urllib.parse import urlsplit

from .errors import ApiError
from .resources import ResourceType, resolve



class WebhookFailed(Exception):
    """The webhook could not be called or gave no usable answer."""


class ValidatingWebhooks:
    def __init__(self, registry) -> None:
        self.registry = registry
        self.warnings: list[str] = []
        # (namespace, service, port) -> (loopback address, port): the cluster
        # network the fake does not have (EndpointSlices may not hold loopback
        # addresses, so the Service cannot lead there by itself).
        self.service_routes: dict[tuple[str, str, int], tuple[str, int]] = {}

    def __call__(self, rt: ResourceType, operation: str, obj: dict | None, old: dict | None,
                 dry_run: bool, subresource: str = "") -> None:
        if rt.group == "admissionregistration.k8s.io":
            return
        configs = self.registry._load_all(resolve("validatingwebhookconfigurations"))
        for config in sorted(configs, key=lambda c: c["metadata"]["name"]):
            for hook in config.get("webhooks") or []:
                if self._matches(hook, rt, operation, subresource, obj or old):
                    self._call(hook, rt, operation, obj, old, dry_run, subresource)

    # --- matching ---------------------------------------------------------------

    def _matches(self, hook: dict, rt: ResourceType, operation: str, subresource: str, obj: dict) -> bool:
        resource = rt.plural + (f"/{subresource}" if subresource else "")
        if not any(_rule_matches(rule, rt, operation, resource) for rule in hook.get("rules") or []):
            return False
        meta = obj.get("metadata") or {}
        if not _selector_matches(hook.get("objectSelector"), meta.get("labels") or {}):
            return False
        if rt.namespaced:
            namespace = self.registry._load(resolve("namespaces"), "", meta.get("namespace") or "")
            labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
            if not _selector_matches(hook.get("namespaceSelector"), labels):
                return False
        return True

    # --- calling ----------------------------------------------------------------

    def _call(self, hook, rt, operation, obj, old, dry_run, subresource) -> None:
        name = hook.get("name", "")
        uid = str(uuid.uuid4())
        meta = (obj or old).get("metadata") or {}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": uid, "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            "requestKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "requestResource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
            **({"subResource": subresource} if subresource else {}), "name": meta.get("name", ""),
            "namespace": meta.get("namespace", "") if rt.namespaced else "", "operation": operation,
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "object": obj, "oldObject": old, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1",
                        "kind": {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(operation, "DeleteOptions")}}}
        try:
            response = self._post(hook, json.dumps(review).encode())
            if response.get("uid") != uid or not isinstance(response.get("allowed"), bool):
                raise WebhookFailed("the answer is not an AdmissionReview response for this request")
        except WebhookFailed as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return
            raise ApiError(500, "InternalError",
                           f'Internal error occurred: failed calling webhook "{name}": {exc}') from None
        self.warnings.extend(response.get("warnings") or [])
        if not response["allowed"]:
            status = response.get("status") or {}
            code = status.get("code") or 403
            raise ApiError(code, status.get("reason") or ("Forbidden" if code == 403 else "BadRequest"),
                           f'admission webhook "{name}" denied the request: {status.get("message", "")}')

    def _post(self, hook: dict, body: bytes) -> dict:
        host, port, path, server_name = self._endpoint(hook.get("clientConfig") or {})
        bundle = (hook.get("clientConfig") or {}).get("caBundle")
        try:
            context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode() if bundle else None)
            timeout = hook.get("timeoutSeconds", 10)
            raw = socket.create_connection((host, port), timeout=timeout)
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            conn.sock = context.wrap_socket(raw, server_hostname=server_name)
            try:
                conn.request("POST", f"{path}?timeout={timeout}s", body=body,
                             headers={"Content-Type": "application/json", "Accept": "application/json"})
                answer = conn.getresponse()
                data = answer.read()
            finally:
                conn.close()
        except (OSError, ssl.SSLError, http.client.HTTPException, ValueError) as exc:
            raise WebhookFailed(f"Post \"https://{server_name}:{port}{path}\": {exc}") from None
        if answer.status != 200:
            raise WebhookFailed(f"expected response code 200, got {answer.status}")
        try:
            return json.loads(data)["response"]
        except (ValueError, KeyError, TypeError):
            raise WebhookFailed("the answer is not JSON with a response") from None

    def _endpoint(self, config: dict) -> tuple[str, int, str, str]:
        """(address, port, path, TLS server name) the webhook is called at."""
        if config.get("url"):
            url = urlsplit(config["url"])
            _loopback(url.hostname or "")
            return url.hostname, url.port or 443, url.path or "/", url.hostname
        ref = config.get("service") or {}
        namespace, name, port = ref.get("namespace", ""), ref.get("name", ""), ref.get("port", 443)
        service = self.registry._load(resolve("services"), namespace, name)
        if service is None:
            raise WebhookFailed(f'service "{name}" not found')
        if not any(p.get("port") == port for p in (service.get("spec") or {}).get("ports") or []):
            raise WebhookFailed(f'service "{namespace}/{name}" has no port {port}')
        route = self.service_routes.get((namespace, name, port))
        if route is None:
            raise WebhookFailed(f"dial tcp {name}.{namespace}.svc:{port}: no route to the service "
                                "(tests give one in service_routes)")
        _loopback(route[0])
        return route[0], route[1], ref.get("path") or "/", f"{name}.{namespace}.svc"


def _loopback(address: str) -> None:
    try:
        if ipaddress.ip_address(address).is_loopback:
            return
    except ValueError:
        pass
    raise WebhookFailed(f"the fake API server only calls webhooks on loopback addresses, not {address!r}")


def _rule_matches(rule: dict, rt: ResourceType, operation: str, resource: str) -> bool:
    def has(values, value) -> bool:
        return "*" in (values or []) or value in (values or [])

    resources = rule.get("resources") or []
    resource_ok = (resource in resources or "*/*" in resources
                   or ("*" in resources and "/" not in resource)
                   or any(r.endswith("/*") and resource.startswith(r[:-1]) for r in resources))
    scope = rule.get("scope", "*")
    scope_ok = scope == "*" or (scope == "Namespaced") == rt.namespaced
    return (has(rule.get("apiGroups"), rt.group) and has(rule.get("apiVersions"), rt.version)
            and has(rule.get("operations"), operation) and resource_ok and scope_ok)


def _selector_matches(selector: dict | None, labels: dict) -> bool:
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
