"""Rendered RBAC grants exactly what deploy/rbac-expected.yaml lists.

The expectation file is the one place that records what the code does with
the Kubernetes API; a verb too many or too few in the chart fails here.
"""

from __future__ import annotations

import copy

import pytest

from . import helmtool, rbac
from .helmtool import workload

SCENARIOS = sorted(helmtool.scenarios())
COMPONENTS = {"ingress-controller": "ingress", "node-proxy": "nodeproxy"}


def service_account(docs, component_label):
    return workload(docs, component_label)["spec"]["template"]["spec"]["serviceAccountName"]


def watched_namespace(docs, component_label) -> str | None:
    """--watch-namespace of the workload, when its RBAC is scoped to it (rbac.scope namespace)."""
    container = workload(docs, component_label)["spec"]["template"]["spec"]["containers"][0]
    for arg in container.get("args") or []:
        if arg.startswith("--watch-namespace="):
            namespace = arg.split("=", 1)[1]
            if any(d["kind"] == "Role" and d["metadata"].get("namespace") == namespace
                   and d["metadata"]["name"].endswith("-watched") for d in docs):
                return namespace
    return None


def assert_exact(docs, component_label):
    expected_key = COMPONENTS[component_label]
    sa = service_account(docs, component_label)
    got = rbac.granted(docs, sa, helmtool.NAMESPACE)
    watched = watched_namespace(docs, component_label) if expected_key == "ingress" else None
    if watched is not None:
        expected_key = "ingress-namespaced"
        got = {(("watched" if scope == f"namespace:{watched}" else scope), *rest) for scope, *rest in got}
    want = rbac.expected(expected_key)
    if got != want:
        raise AssertionError(
            f"RBAC of {expected_key} differs from deploy/rbac-expected.yaml\n"
            f"granted but not expected:\n{rbac.describe(got - want)}\n"
            f"expected but not granted:\n{rbac.describe(want - got)}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_component_gets_exactly_the_expected_access(rendered, scenario):
    docs = rendered(scenario)
    labels = {helmtool.component_of(w) for w in helmtool.workloads(docs)}
    assert labels
    for label in labels:
        assert_exact(docs, label)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_service_accounts_are_rendered_and_distinct(rendered, scenario):
    docs = rendered(scenario)
    accounts = {d["metadata"]["name"] for d in helmtool.by_kind(docs, "ServiceAccount")}
    used = [w["spec"]["template"]["spec"]["serviceAccountName"] for w in helmtool.workloads(docs)]
    assert sorted(used) == sorted(accounts)
    assert len(set(used)) == len(used)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_role_is_bound(rendered, scenario):
    docs = rendered(scenario)
    refs = {(b["roleRef"]["kind"], b["roleRef"]["name"])
            for b in docs if b["kind"] in ("RoleBinding", "ClusterRoleBinding")}
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert roles == refs


def test_rbac_can_be_left_to_the_cluster_admin(helm):
    docs = helm.template(sets=["nodeproxy.enabled=true", "ingress.rbac.create=false",
                               "nodeproxy.rbac.create=false"])
    assert not [d for d in docs if d["kind"].endswith(("Role", "RoleBinding"))]


def test_expectation_file_names_known_scopes_only():
    for component in COMPONENTS.values():
        atoms = rbac.expected(component)
        assert atoms
        assert {scope for scope, *_ in atoms} <= {"cluster", "release"}


# --- the check itself catches drift ------------------------------------------

def _mutated(docs, kind, mutate):
    docs = copy.deepcopy(docs)
    role = next(d for d in docs if d["kind"] == kind)
    mutate(role)
    return docs


@pytest.mark.parametrize("mutate, kind", [
    (lambda r: r["rules"][0]["verbs"].append("get"), "ClusterRole"),            # extra verb
    (lambda r: r["rules"][0]["verbs"].remove("watch"), "ClusterRole"),          # missing verb
    (lambda r: r["rules"].append({"apiGroups": [""], "resources": ["pods"],
                                  "verbs": ["list"]}), "ClusterRole"),          # extra resource
    (lambda r: r["rules"][0]["verbs"].append("delete"), "Role"),                # extra lease verb
])
def test_drift_is_detected(rendered, mutate, kind):
    docs = _mutated(rendered("ingress-only"), kind, mutate)
    with pytest.raises(AssertionError, match="differs from deploy/rbac-expected.yaml"):
        assert_exact(docs, "ingress-controller")


def test_wildcards_are_refused(rendered):
    docs = _mutated(rendered("ingress-only"), "ClusterRole", lambda r: r["rules"][0]["verbs"].append("*"))
    with pytest.raises(rbac.RbacShapeError, match="wildcard"):
        assert_exact(docs, "ingress-controller")


def test_scope_matters(rendered):
    """The lease grant moved from the namespaced Role to the ClusterRole is drift."""
    docs = copy.deepcopy(rendered("ingress-only"))
    role = next(d for d in docs if d["kind"] == "Role")
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    cluster_role["rules"].extend(role["rules"])
    role["rules"] = []
    with pytest.raises(AssertionError, match="granted but not expected:\n  cluster"):
        assert_exact(docs, "ingress-controller")


def test_namespaced_mode_grants_nothing_cluster_wide_but_cluster_scoped_kinds(rendered):
    """#15: with the controller's token, `kubectl get secrets -A` returned another
    namespace's Opaque password; in rbac.scope namespace no ClusterRole names a
    namespaced resource (only classes, nodes and namespace labels)."""
    docs = rendered("ingress-namespaced")
    sa = service_account(docs, "ingress-controller")
    cluster = {(group, resource) for scope, group, resource, _ in rbac.granted(docs, sa, helmtool.NAMESPACE)
               if scope == "cluster"}
    assert cluster == {("networking.k8s.io", "ingressclasses"), ("", "nodes"), ("", "namespaces"),
                       ("gateway.networking.k8s.io", "gatewayclasses"),
                       ("gateway.networking.k8s.io", "gatewayclasses/status")}


def test_namespaced_mode_without_a_watched_namespace_is_refused(helm, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("ingress: {enabled: true, rbac: {scope: namespace}}\nnodeproxy: {enabled: false}\n")
    with pytest.raises(Exception, match="needs watchNamespace"):
        helm.template(values=[values])
