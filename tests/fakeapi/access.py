"""Who is asking and may they: the request-facing side of authentication,
impersonation and RBAC, plus the API objects that are about access
(SelfSubjectAccessReview, SubjectAccessReview, TokenRequest).

With `enabled=False` (the default server) every request runs as a member of
`system:masters` and nothing is refused; reviews answer "allowed".
The rules themselves live in `rbac`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from . import rbac
from .errors import ApiError, forbidden
from .rbac import Attributes, UserInfo
from .resources import ResourceType, resolve

_EVERYONE_ADMIN = UserInfo("fakeapi-admin", ("system:masters", "system:authenticated"))


@dataclass(frozen=True)
class _Named:
    """A resource known only by name, for messages about users and groups."""
    plural: str
    group: str = ""


class AccessControl:
    def __init__(self, storage, registry, enabled: bool):
        self.enabled = enabled
        self.denied: list[dict] = []          # every 403, newest last
        self._registry = registry
        self._authenticator = rbac.Authenticator()
        self._authorizer = rbac.Authorizer(storage)

    # --- identities -----------------------------------------------------------------------

    def add_token(self, token: str, user: str, groups=()) -> None:
        self._authenticator.add_token(token, user, groups)

    def add_service_account_token(self, token: str, namespace: str, name: str) -> None:
        user, groups = rbac.service_account_user(namespace, name)
        self.add_token(token, user, groups)

    def authenticate(self, authorization: str | None) -> UserInfo | None:
        """The requesting user; None for a token nobody issued (401)."""
        if not self.enabled:
            return _EVERYONE_ADMIN
        return self._authenticator.authenticate(authorization)

    def impersonate(self, user: UserInfo, target: str | None, groups: list[str], path: str) -> UserInfo:
        """Apply Impersonate-User/-Group headers (`kubectl --as`), if `user` may."""
        if not target:
            if groups:
                raise ApiError(500, "InternalError", "Internal error occurred: requested "
                               f"impersonation of groups {groups} without impersonating a user")
            return user
        for attrs in rbac.impersonation_checks(user, target, groups):
            if self.enabled and not self._authorizer.allowed(attrs):
                self._record(attrs, "IMPERSONATE", path)
                raise forbidden(user.name, "impersonate", _Named(attrs.resource), "",
                                attrs.name, attrs.namespace or None)
        return rbac.impersonated(target, groups)

    # --- decisions ------------------------------------------------------------------------

    def authorize(self, attrs: Attributes, method: str, path: str) -> None:
        """Raise a 403 Status (and record it) unless RBAC allows `attrs`."""
        if not self.enabled or self._authorizer.allowed(attrs):
            return
        self._record(attrs, method, path)
        if not attrs.is_resource:
            raise ApiError(403, "Forbidden",
                           f'forbidden: User "{attrs.user.name}" cannot {attrs.verb} path "{attrs.path}"')
        resource = resolve(attrs.resource, f"{attrs.group}/v1" if attrs.group else "v1")
        raise forbidden(attrs.user.name, attrs.verb, resource, attrs.subresource,
                        attrs.name or None, attrs.namespace or None)

    def _record(self, attrs: Attributes, method: str, path: str) -> None:
        self.denied.append({
            "user": attrs.user.name, "groups": list(attrs.user.groups), "verb": attrs.verb,
            "group": attrs.group, "resource": attrs.resource, "subresource": attrs.subresource,
            "namespace": attrs.namespace, "name": attrs.name, "method": method, "path": path})

    # --- access API objects ---------------------------------------------------------------

    def review(self, rt: ResourceType, body: dict, user: UserInfo) -> dict:
        """Answer a SelfSubjectAccessReview (about `user`) or a SubjectAccessReview."""
        body = body if isinstance(body, dict) else {}
        spec = dict(body.get("spec") or {})
        if rt.kind == "SubjectAccessReview":
            subject = UserInfo(spec.get("user", ""), tuple(spec.get("groups") or ()))
        else:
            subject = user
        attrs = rbac.review_attributes(subject, spec)
        allowed = not self.enabled or self._authorizer.allowed(attrs)
        status = {"allowed": allowed}
        if allowed:
            status["reason"] = "allowed by RBAC" if self.enabled else "RBAC is not enforced"
        return {"kind": rt.kind, "apiVersion": rt.api_version,
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def issue_token(self, namespace: str, name: str, body: dict) -> dict:
        """A TokenRequest for a ServiceAccount (`kubectl create token`)."""
        self._registry.get(resolve("serviceaccounts"), namespace, name)   # 404 if missing
        spec = dict(body.get("spec") or {}) if isinstance(body, dict) else {}
        spec.setdefault("audiences", ["https://kubernetes.default.svc"])
        spec.setdefault("expirationSeconds", 3600)
        token = f"fakeapi-sa-{secrets.token_hex(16)}"
        self.add_service_account_token(token, namespace, name)
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                time.gmtime(time.time() + spec["expirationSeconds"]))
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
                "spec": spec, "status": {"token": token, "expirationTimestamp": expires}}
