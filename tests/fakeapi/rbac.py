"""Bearer-token authentication and RBAC authorization over the stored objects.

Authorization evaluates the Role/ClusterRole/RoleBinding/ClusterRoleBinding
objects stored in the fake server itself, the way the real RBAC authorizer
does: ClusterRoleBindings grant their ClusterRole's rules everywhere;
RoleBindings grant a Role (same namespace) or a ClusterRole's rules inside
their own namespace only. Members of `system:masters` may do anything.
Every authenticated user may read discovery/version/health paths and create
SelfSubjectAccessReviews, like the real server's bootstrap bindings.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .resources import resolve
from .storage import Storage

ADMIN_TOKEN = "fakeapi-admin-token"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()


ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True)
class Attributes:
    """What a request wants to do, in RBAC's terms."""
    user: UserInfo
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""           # for non-resource requests

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


class Authenticator:
    def __init__(self):
        self._lock = threading.Lock()
        self._tokens: dict[str, UserInfo] = {
            ADMIN_TOKEN: UserInfo("fakeapi-admin", ("system:masters", "system:authenticated"))}

    def add_token(self, token: str, user: str, groups: list[str] | tuple[str, ...] = ()) -> None:
        groups = tuple(groups)
        if "system:authenticated" not in groups:
            groups += ("system:authenticated",)
        with self._lock:
            self._tokens[token] = UserInfo(user, groups)

    def authenticate(self, authorization: str | None) -> UserInfo | None:
        """The user for an Authorization header; ANONYMOUS without one, None if invalid."""
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        with self._lock:
            return self._tokens.get(token.strip())


def service_account_user(namespace: str, name: str) -> tuple[str, list[str]]:
    return (f"system:serviceaccount:{namespace}:{name}",
            ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"])


def _subject_matches(subject: dict, user: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _has(values, wanted: str) -> bool:
    return "*" in values or wanted in values


def _resource_matches(rule_resources, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for item in rule_resources:
        if item in ("*", combined):
            return True
        if subresource and item == f"*/{subresource}":
            return True
    return False


def _non_resource_matches(rule_urls, path: str) -> bool:
    for url in rule_urls:
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(rule: dict, attrs: Attributes) -> bool:
    if not _has(rule.get("verbs") or [], attrs.verb):
        return False
    if not attrs.is_resource:
        return _non_resource_matches(rule.get("nonResourceURLs") or [], attrs.path)
    if not _has(rule.get("apiGroups") or [], attrs.group):
        return False
    if not _resource_matches(rule.get("resources") or [], attrs.resource, attrs.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


# The real server's bootstrap policy grants every authenticated user these
# (system:discovery, system:basic-user, system:public-info-viewer).
_BASIC_USER_RULES = (
    {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi",
                                           "/openapi/*", "/version", "/version/", "/healthz",
                                           "/livez", "/readyz"]},
    {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
    {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
)


class Authorizer:
    def __init__(self, storage: Storage):
        self._storage = storage

    def _rules(self, kind: str, namespace: str, name: str) -> list[dict]:
        rt = resolve("roles" if kind == "Role" else "clusterroles")
        role = self._storage.get(rt, namespace if kind == "Role" else "", name)
        if role is None:
            return []
        rules = list(role.get("rules") or [])
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
        if selectors and kind == "ClusterRole":
            for other in self._storage.objects(rt):
                labels = (other.get("metadata") or {}).get("labels") or {}
                for sel in selectors:
                    wanted = sel.get("matchLabels") or {}
                    if wanted and all(labels.get(k) == v for k, v in wanted.items()):
                        rules += other.get("rules") or []
        return rules

    def allowed(self, attrs: Attributes) -> bool:
        if "system:masters" in attrs.user.groups:
            return True
        if "system:authenticated" in attrs.user.groups \
                and any(rule_allows(r, attrs) for r in _BASIC_USER_RULES):
            return True
        for binding in self._storage.objects(resolve("clusterrolebindings")):
            if any(_subject_matches(s, attrs.user, "") for s in binding.get("subjects") or []):
                ref = binding.get("roleRef") or {}
                if any(rule_allows(r, attrs) for r in self._rules("ClusterRole", "", ref.get("name", ""))):
                    return True
        if not attrs.namespace:
            return False
        for binding in self._storage.objects(resolve("rolebindings")):
            meta = binding.get("metadata") or {}
            if meta.get("namespace") != attrs.namespace:
                continue
            if any(_subject_matches(s, attrs.user, attrs.namespace) for s in binding.get("subjects") or []):
                ref = binding.get("roleRef") or {}
                rules = self._rules(ref.get("kind", ""), attrs.namespace, ref.get("name", ""))
                if any(rule_allows(r, attrs) for r in rules):
                    return True
        return False


# --- access reviews and impersonation ---------------------------------------------------------

def review_attributes(user: UserInfo, spec: dict) -> Attributes:
    """The Attributes a (Self)SubjectAccessReview spec asks about."""
    resource = spec.get("resourceAttributes")
    if resource:
        return Attributes(user, resource.get("verb", ""), resource.get("group", ""),
                          resource.get("resource", ""), resource.get("subresource", ""),
                          resource.get("namespace", ""), resource.get("name", ""))
    non_resource = spec.get("nonResourceAttributes") or {}
    return Attributes(user, non_resource.get("verb", ""), path=non_resource.get("path", ""))


def impersonation_checks(user: UserInfo, target_user: str, groups: list[str]) -> list[Attributes]:
    """What `user` must be allowed to do to act as `target_user` with `groups`."""
    checks = []
    if target_user.startswith("system:serviceaccount:"):
        namespace, _, name = target_user[len("system:serviceaccount:"):].partition(":")
        checks.append(Attributes(user, "impersonate", "", "serviceaccounts", "", namespace, name))
    else:
        checks.append(Attributes(user, "impersonate", "", "users", "", "", target_user))
    checks += [Attributes(user, "impersonate", "", "groups", "", "", g) for g in groups]
    return checks


def impersonated(target_user: str, groups: list[str]) -> UserInfo:
    """The user a request runs as once impersonation is allowed; like the real
    server, service accounts get their implicit groups and everyone gets
    system:authenticated."""
    all_groups = list(groups)
    if target_user.startswith("system:serviceaccount:"):
        namespace = target_user[len("system:serviceaccount:"):].partition(":")[0]
        all_groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    all_groups.append("system:authenticated")
    return UserInfo(target_user, tuple(dict.fromkeys(all_groups)))
