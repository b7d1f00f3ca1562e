"""The admission webhook answers for snippets, custom-headers and mirroring
exactly as the controller would: snippets denied while the switch is off,
a snippet outside the parsed subset denied naming its line, the subset
allowed when the switch is on (the ConfigMap's keys, as the controller reads them)."""

from __future__ import annotations

from platformd.common.store import Store
from platformd.ingress.webhook_review import AdmissionRequest, IngressReviewer
from tests.ingress.test_translate_fixtures import configmap, snapshot
from tests.ingress.test_webhook_review import INDEXERS, OPTIONS, OTHERS, web_ingress

SWITCH_ON = configmap({"allow-snippet-annotations": "true", "annotations-risk-level": "Critical"})


def review(obj: dict, *extra: dict):
    reviewer = IngressReviewer(Store(INDEXERS), lambda ingresses: snapshot(*ingresses, *OTHERS, *extra), OPTIONS,
                               lambda: True)
    meta = obj["metadata"]
    return reviewer.review(AdmissionRequest(uid="u1", group="networking.k8s.io", version="v1", kind="Ingress",
                                            operation="CREATE", namespace=meta["namespace"], name=meta["name"],
                                            object=obj, old_object=None))


def test_snippets_are_denied_while_the_switch_is_off():
    verdict = review(web_ingress("a", annotations={"configuration-snippet": "more_set_headers 'X: y';"}))
    assert not verdict.allowed and "configuration-snippet" in verdict.errors[0] and "disabled" in verdict.errors[0]


def test_with_the_switch_on_the_subset_is_allowed_and_the_rest_denied_by_line():
    good = web_ingress("a", annotations={"configuration-snippet": "more_set_headers 'X: y';"})
    assert review(good, SWITCH_ON).allowed
    bad = web_ingress("b", annotations={"configuration-snippet": "add_header X y;\nlua_code_cache off;"})
    verdict = review(bad, SWITCH_ON)
    assert not verdict.allowed and "line 2" in verdict.errors[0] and "lua_code_cache" in verdict.errors[0]


def test_hostile_mirror_target_is_denied():
    verdict = review(web_ingress("a", annotations={"mirror-target": "http://169.254.169.254.nip.io/"}))
    assert not verdict.allowed and "mirror-target" in verdict.errors[0]
