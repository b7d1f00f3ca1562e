"""Validation of admissionregistration.k8s.io/v1 ValidatingWebhookConfigurations.

The rules of the real server's `pkg/apis/admissionregistration/validation` for
the fields a webhook configuration needs to be callable; messages follow its
wording. Defaults (failurePolicy Fail, matchPolicy Equivalent, timeoutSeconds
10, empty selectors) are not filled in: the project's code writes back what it
read, so it never depends on them.
"""

from __future__ import annotations

import base64
import binascii
import re

from .errors import FieldError, duplicate, invalid, not_supported, required

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]


def validate_validating_webhook_configuration(obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    names: set[str] = set()
    webhooks = obj.get("webhooks") or []
    if not isinstance(webhooks, list):
        return [invalid("webhooks", webhooks, "must be a list")]
    for i, hook in enumerate(webhooks):
        base = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            errs.append(invalid(base, hook, "must be an object"))
            continue
        errs += _name_errors(f"{base}.name", hook.get("name"), names)
        errs += _review_versions_errors(f"{base}.admissionReviewVersions", hook.get("admissionReviewVersions"))
        errs += _choice(f"{base}.sideEffects", hook.get("sideEffects"), ["None", "NoneOnDryRun"], needed=True)
        errs += _choice(f"{base}.failurePolicy", hook.get("failurePolicy"), ["Fail", "Ignore"])
        errs += _choice(f"{base}.matchPolicy", hook.get("matchPolicy"), ["Equivalent", "Exact"])
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30):
            errs.append(invalid(f"{base}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"))
        errs += _client_config_errors(f"{base}.clientConfig", hook.get("clientConfig"))
        for j, rule in enumerate(hook.get("rules") or []):
            for op in (rule or {}).get("operations") or []:
                if op not in _OPERATIONS:
                    errs.append(not_supported(f"{base}.rules[{j}].operations", op, _OPERATIONS))
    return errs


def _name_errors(field: str, name, seen: set[str]) -> list[FieldError]:
    if not name:
        return [required(field, "")]
    if not isinstance(name, str) or not _SUBDOMAIN.match(name) or len(name) > 253:
        return [invalid(field, name, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                     "characters, '-' or '.', and must start and end with an alphanumeric character")]
    if name.count(".") < 2:
        return [invalid(field, name, "should be a domain with at least three segments separated by dots")]
    if name in seen:
        return [duplicate(field, name)]
    seen.add(name)
    return []


def _review_versions_errors(field: str, versions) -> list[FieldError]:
    if not versions:
        return [required(field, "must specify one of v1, v1beta1")]
    if not isinstance(versions, list) or not {"v1", "v1beta1"} & set(versions):
        return [invalid(field, versions, "must include at least one of v1, v1beta1")]
    return []


def _choice(field: str, value, allowed: list[str], needed: bool = False) -> list[FieldError]:
    if value is None:
        return [required(field, "")] if needed else []
    return [] if value in allowed else [not_supported(field, value, allowed)]


def _client_config_errors(field: str, config) -> list[FieldError]:
    if not isinstance(config, dict):
        return [required(field, "")]
    errs: list[FieldError] = []
    url, service = config.get("url"), config.get("service")
    if bool(url) == bool(service):
        errs.append(required(field, "exactly one of url or service is required"))
    if service:
        for key in ("namespace", "name"):
            if not service.get(key):
                errs.append(required(f"{field}.service.{key}", f"service {key} is required"))
        port = service.get("port", 443)
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            errs.append(invalid(f"{field}.service.port", port, "port is not valid: must be between 1 and 65535"))
        path = service.get("path")
        if path is not None and not (isinstance(path, str) and path.startswith("/")):
            errs.append(invalid(f"{field}.service.path", path, "must start with a '/'"))
    bundle = config.get("caBundle")
    if bundle is not None:
        try:
            base64.b64decode(bundle, validate=True)
        except (binascii.Error, TypeError, ValueError):
            errs.append(invalid(f"{field}.caBundle", bundle, "must be base64-encoded bytes"))
    return errs
