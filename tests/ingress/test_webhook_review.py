"""The webhook's Ingress reviewer: the controller's own problems, before the object is stored.

The cluster is a real informer ``Store`` with the reviewer's indexes and a
snapshot function like the controller's (the Ingresses asked for plus every
Service, slice and Secret); each verdict is compared with what the full
translation of the cluster reports once the object is in it.
"""

from __future__ import annotations

import pytest

from platformd.common.store import Store
from platformd.ingress.translate import TranslateOptions, build
from platformd.ingress.webhook_admission import AdmissionRequest
from platformd.ingress.webhook_review import ERROR_REASONS, INDEXERS, NOT_SYNCED, IngressReviewer, index_ingress_by_host
from tests.ingress.test_translate_fixtures import NOW, ingress, path, rule, snapshot, tls_secret, web

OLDER, NEWER = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
OTHERS = [*web(), *web(name="api", ips=("10.2.0.1",)), tls_secret("tls"), tls_secret("other-tls")]
OPTIONS = TranslateOptions(now=NOW)


class Cluster:
    def __init__(self, *ingresses: dict, synced: bool = True) -> None:
        self.store = Store(INDEXERS)
        for obj in ingresses:
            self.store.add(obj)
        self.asked: list[tuple[str, ...]] = []
        self.synced = synced
        self.reviewer = IngressReviewer(self.store, self.snapshot_of, OPTIONS, lambda: self.synced)

    def snapshot_of(self, ingresses):
        ingresses = list(ingresses)
        self.asked.append(tuple(sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in ingresses)))
        return snapshot(*ingresses, *OTHERS)

    def review(self, operation: str, obj: dict | None, old: dict | None = None):
        meta = (obj or old)["metadata"]
        return self.reviewer.review(AdmissionRequest(
            uid="u1", group="networking.k8s.io", version="v1", kind="Ingress", operation=operation,
            namespace=meta["namespace"], name=meta["name"], object=obj, old_object=old))

    def full_problems(self, obj: dict) -> list:
        """What the controller reports for ``obj`` once it is in the cluster."""
        others = [o for o in self.store.list() if o["metadata"]["name"] != obj["metadata"]["name"]]
        result = build(snapshot(*others, obj, *OTHERS), OPTIONS)
        return [p for p in result.problems if (p.kind, p.name) == ("Ingress", obj["metadata"]["name"])]


def web_ingress(name: str, host: str = "example.com", p: str = "/app", created: str = NEWER, **kw) -> dict:
    return ingress(name, rules=[rule(host, path(p))], created=created, **kw)


def test_a_valid_ingress_is_allowed_without_warnings():
    verdict = Cluster().review("CREATE", web_ingress("a"))
    assert verdict.allowed and verdict.warnings == ()


def test_an_invalid_annotation_is_denied_with_the_controllers_message():
    obj = web_ingress("a", annotations={"proxy-read-timeout": "1; lua_code"})
    cluster = Cluster()
    verdict = cluster.review("CREATE", obj)
    expected = [p.message for p in cluster.full_problems(obj) if p.reason == "InvalidAnnotation"]
    assert not verdict.allowed
    assert list(verdict.errors) == expected and "proxy-read-timeout" in expected[0]


def test_an_ignored_annotation_is_a_warning_as_in_the_controller():
    obj = web_ingress("a", annotations={"some-future-thing": "x"})
    verdict = Cluster().review("CREATE", obj)
    assert verdict.allowed
    assert any("some-future-thing" in w for w in verdict.warnings)


def test_a_missing_service_is_only_a_warning():
    obj = ingress("a", rules=[rule("example.com", path("/app", service="not-yet"))], created=NEWER)
    verdict = Cluster().review("CREATE", obj)
    assert verdict.allowed and verdict.warnings


def test_a_host_and_path_another_ingress_holds_is_denied_naming_it():
    cluster = Cluster(web_ingress("old", created=OLDER))
    obj = web_ingress("new", created=NEWER)
    verdict = cluster.review("CREATE", obj)
    assert not verdict.allowed
    assert list(verdict.errors) == [p.message for p in cluster.full_problems(obj)]
    assert "default/old" in verdict.errors[0]


def test_other_paths_and_hosts_do_not_conflict():
    cluster = Cluster(web_ingress("old", created=OLDER), web_ingress("elsewhere", host="other.com", p="/app"))
    assert cluster.review("CREATE", web_ingress("new", p="/other")).allowed


def test_an_older_ingress_taking_a_path_back_is_allowed_and_warns_about_the_loser():
    old = web_ingress("old", p="/x", created=OLDER)
    cluster = Cluster(old, web_ingress("young", p="/app", created=NEWER))
    verdict = cluster.review("UPDATE", web_ingress("old", p="/app", created=OLDER), old)
    assert verdict.allowed
    assert any(w.startswith("Ingress default/young:") and "default/old" in w for w in verdict.warnings)


def test_an_update_keeps_an_error_it_already_had_as_a_warning():
    cluster = Cluster(web_ingress("old", created=OLDER))
    stored = web_ingress("new", created=NEWER)
    cluster.store.add(stored)
    relabelled = {**stored, "metadata": {**stored["metadata"], "labels": {"team": "a"}}}
    verdict = cluster.review("UPDATE", relabelled, stored)
    assert verdict.allowed
    assert any("already so before this change" in w for w in verdict.warnings)


def test_tls_host_claimed_with_another_secret_is_denied():
    tls = [{"hosts": ["example.com"], "secretName": "tls"}]
    cluster = Cluster(web_ingress("old", p="/a", created=OLDER, tls=tls))
    obj = web_ingress("new", p="/b", tls=[{"hosts": ["example.com"], "secretName": "other-tls"}])
    verdict = cluster.review("CREATE", obj)
    assert not verdict.allowed and "TLS host" in verdict.errors[0]


def test_server_alias_naming_another_ingresses_host_is_denied():
    cluster = Cluster(web_ingress("old", host="taken.com", created=OLDER))
    obj = web_ingress("new", annotations={"server-alias": "taken.com"})
    verdict = cluster.review("CREATE", obj)
    assert [p.message for p in cluster.full_problems(obj)] == list(verdict.errors)
    assert not verdict.allowed


def canary_ingress() -> dict:
    return ingress("canary", rules=[rule("example.com", path("/app", service="api"))], created=NEWER,
                   annotations={"canary": "true", "canary-weight": "10"})


def test_canary_on_an_existing_primary_is_allowed_and_without_one_warns():
    with_primary = Cluster(web_ingress("primary", created=OLDER)).review("CREATE", canary_ingress())
    assert with_primary.allowed and with_primary.warnings == ()
    alone = Cluster().review("CREATE", canary_ingress())
    assert alone.allowed and any("no primary" in w for w in alone.warnings)


def test_deleting_a_primary_warns_that_its_canary_loses_it():
    primary = web_ingress("primary", created=OLDER)
    cluster = Cluster(primary, canary_ingress())
    verdict = cluster.review("DELETE", None, primary)
    assert verdict.allowed
    assert any(w.startswith("Ingress default/canary:") for w in verdict.warnings)


def test_delete_without_old_object_reads_the_store():
    primary = web_ingress("primary", created=OLDER)
    cluster = Cluster(primary)
    verdict = cluster.reviewer.review(AdmissionRequest(
        uid="u", group="networking.k8s.io", version="v1", kind="Ingress", operation="DELETE",
        namespace="default", name="primary"))
    assert verdict.allowed


def test_another_class_is_not_ours_and_not_reviewed():
    cluster = Cluster(web_ingress("old", created=OLDER))
    obj = web_ingress("new", class_name="nginx", annotations={"proxy-read-timeout": "bad"})
    verdict = cluster.review("CREATE", obj)
    assert verdict.allowed and verdict.warnings == ()


def test_an_ingress_being_deleted_is_not_blocked():
    obj = web_ingress("a", annotations={"proxy-read-timeout": "bad"})
    obj["metadata"]["deletionTimestamp"] = NEWER
    assert Cluster().review("UPDATE", obj, obj).allowed


def test_namespace_from_the_request_when_the_object_has_none():
    cluster = Cluster(web_ingress("old", created=OLDER))
    obj = web_ingress("new")
    del obj["metadata"]["namespace"]
    verdict = cluster.reviewer.review(AdmissionRequest(
        uid="u", group="networking.k8s.io", version="v1", kind="Ingress", operation="CREATE",
        namespace="default", name="new", object=obj))
    assert not verdict.allowed and "default/old" in verdict.errors[0]


def test_before_the_caches_synced_only_the_object_is_checked():
    cluster = Cluster(web_ingress("old", created=OLDER), synced=False)
    verdict = cluster.review("CREATE", web_ingress("new"))
    assert verdict.allowed and NOT_SYNCED in verdict.warnings
    bad = cluster.review("CREATE", web_ingress("bad", annotations={"proxy-read-timeout": "x"}))
    assert not bad.allowed


def test_a_review_translates_the_neighbourhood_not_the_cluster():
    many = [ingress(f"i{n}", rules=[rule(f"h{n}.example.com", path(service="api"))], created=OLDER)
            for n in range(300)]
    cluster = Cluster(*many, web_ingress("same-host", p="/other", created=OLDER))
    cluster.review("CREATE", web_ingress("new"))
    assert cluster.asked == [("default/same-host",), ("default/new", "default/same-host")]


def test_neighbours_through_a_shared_service_are_included():
    cluster = Cluster(web_ingress("far", host="far.com", created=OLDER))
    cluster.review("CREATE", web_ingress("new"))
    assert "default/far" in cluster.asked[-1]


def test_host_index_names_rule_tls_and_alias_hosts():
    obj = ingress("a", rules=[rule("A.example.com", path()), rule(None, path())],
                  tls=[{"hosts": ["*.example.com"]}], annotations={"server-alias": "b.example.com, c.example.com"})
    assert index_ingress_by_host(obj) == ["", "*.example.com", "a.example.com", "b.example.com", "c.example.com"]


@pytest.mark.parametrize("annotations, host, p", [
    ({"rewrite-target": "/$1", "use-regex": "true"}, "example.com", "/app(/|$)(.*)"),
    ({"whitelist-source-range": "10.0.0.0/8"}, "example.com", "/app"),
    ({"auth-type": "basic"}, "example.com", "/app"),
    ({"configuration-snippet": "more_set_headers 'x: y';"}, "example.com", "/new"),
    ({}, "bad_host!", "/app"),
    ({"load-balance": "ewma"}, "example.com", "/lb"),
])
def test_errors_are_exactly_the_controllers(annotations, host, p):
    cluster = Cluster(web_ingress("old", created=OLDER))
    obj = ingress("new", rules=[rule(host, path(p, path_type="ImplementationSpecific"))], created=NEWER,
                  annotations=annotations)
    verdict = cluster.review("CREATE", obj)
    expected = cluster.full_problems(obj)
    assert list(verdict.errors) == [x.message for x in expected if x.reason in ERROR_REASONS]
    assert set(verdict.warnings) == {x.message for x in expected if x.reason not in ERROR_REASONS}
