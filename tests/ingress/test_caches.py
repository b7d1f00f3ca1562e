"""``caches.Caches``: what one owner reuses never shows, and owners do not meet.

Three contracts of the caches (see platform/ingress/caches.py), checked
through the public API (``translate.build``, ``render.dynamic_sections``,
``render.render_nginx_conf``) over generated sequences of cluster changes:

* reuse vs fresh: after every change, a build and the data plane sections
  made with the owner's warm ``Caches`` equal those of a deep copy of the
  same objects made without one;
* mutation detector (after client-go's cache mutation detector): no step
  modifies a store object, a Configuration an earlier build returned, or a
  route payload the cache hands out again (each is compared with a deep
  copy taken when it was first seen);
* owners: a second owner (the webhook's reviews, another ``Caches``) never
  changes what the first one's next build reuses.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from platformd.ingress.caches import Caches
from platformd.ingress.render import dynamic_sections, render_nginx_conf
from platformd.ingress.translate import build
from platformd.ingress.webhook_admission import AdmissionRequest
from platformd.ingress.webhook_review import INDEXERS, IngressReviewer
from platformd.common.store import Store
from tests.ingress.test_translate_incremental import OPTIONS, RUNTIME, _frozen_copy, base, certs, fresh  # noqa: F401
from tests.ingress_e2e import objects as o

SERVICES = ("s1", "s2", "s3", "s4", "p1", "p2", "empty", "missing")
HOSTS = ("a.example", "b.example", "p.example", "g.example", None)
ANNOTATIONS = (
    {},
    {"proxy-body-size": "8m"},
    {"canary": "true", "canary-weight": "40"},
    {"load-balance": "ewma"},
    {"server-alias": "www.g.example"},
    {"ssl-redirect": "false"},
    {"configuration-snippet": "x"},  # refused: the Ingress contributes nothing
)
CONFIGMAPS = (None, {"ssl-redirect": "false"}, {"load-balance": "ewma", "proxy-body-size": "2m"})

_PATHS = st.lists(st.tuples(st.sampled_from(["/", "/api", "/x"]), st.sampled_from(SERVICES),
                            st.sampled_from([80, 81]), st.sampled_from(["Prefix", "Exact"])),
                  min_size=1, max_size=3)
_CHANGE = st.one_of(
    st.tuples(st.just("put ingress"), st.sampled_from(["n0", "n1", "n2", "a", "plain", "canary"]),
              st.sampled_from(HOSTS), _PATHS, st.sampled_from(range(len(ANNOTATIONS))),
              st.sampled_from([None, "2023-01-01T00:00:00Z"]), st.booleans()),
    st.tuples(st.just("delete ingress"), st.sampled_from(["n0", "n1", "a", "b", "plain", "canary", "catchall"])),
    st.tuples(st.just("slice"), st.sampled_from(SERVICES[:-1]),
              st.lists(st.sampled_from(["10.1.0.1", "10.1.0.2", "10.1.0.3"]), max_size=2, unique=True)),
    st.tuples(st.just("delete slice"), st.sampled_from(SERVICES[:-1])),
    st.tuples(st.just("service port"), st.sampled_from(SERVICES[:-1]), st.sampled_from([80, 81])),
    st.tuples(st.just("delete service"), st.sampled_from(SERVICES[:-1])),
    st.tuples(st.just("secret"), st.sampled_from(["a.example", "b.example"])),
    st.tuples(st.just("configmap"), st.sampled_from(range(len(CONFIGMAPS)))),
)


def apply(c, change) -> None:
    """One change to the cluster, made as the API makes it: a new object replaces the old."""
    kind, *args = change
    if kind == "put ingress":
        name, host, paths, annotations, created, tls = args
        c.put_ingress(o.ingress(name, host, [(p, s, port, match) for p, s, port, match in paths],
                                annotations=dict(ANNOTATIONS[annotations]),
                                tls=[{"hosts": [host], "secretName": "tls-a"}] if tls and host else None),
                      created=created)
    elif kind == "delete ingress":
        c.ingresses.pop(f"default/{args[0]}", None)
    elif kind == "slice":
        c.slices[f"default/{args[0]}"] = (o.endpoint_slice(args[0], args[1]),)
    elif kind == "delete slice":
        c.slices.pop(f"default/{args[0]}", None)
    elif kind == "service port":
        c.services[f"default/{args[0]}"] = o.service(args[0], port=args[1])
    elif kind == "delete service":
        c.services.pop(f"default/{args[0]}", None)
    elif kind == "secret":
        c.put_secret("tls-a", args[0])
    elif kind == "configmap":
        data = CONFIGMAPS[args[0]]
        c.configmap = None if data is None else {"metadata": {"name": "cfg", "namespace": "default"},
                                                 "data": dict(data)}


def sections_of(config, caches: Caches | None) -> list[tuple[str, str, bytes]]:
    return [(s.name, s.checksum, s.body) for s in dynamic_sections(config, caches)]


class MutationDetector:
    """Deep copies of everything handed out, compared again on ``check``."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[object, object]] = {}

    def watch(self, *objects: object) -> None:
        for obj in objects:
            if id(obj) not in self._seen:
                self._seen[id(obj)] = (obj, copy.deepcopy(obj))

    def check(self) -> None:
        for obj, original in self._seen.values():
            assert obj == original, f"a cached object was modified: {obj!r:.200}"


def step(c, caches: Caches, detector: MutationDetector):
    snap = c.snapshot()
    before = _frozen_copy(snap)
    reused = build(snap, OPTIONS, caches)
    sections = sections_of(reused.configuration, caches)
    conf = render_nginx_conf(reused.configuration, RUNTIME)
    assert _frozen_copy(snap) == before, "a build or render modified a store object"
    detector.watch(reused.configuration, *caches.routes.sections(reused.configuration))
    detector.check()
    expected = fresh(snap)  # a deep copy of the objects, no caches
    assert reused == expected
    assert sections == sections_of(expected.configuration, None)
    assert conf == render_nginx_conf(expected.configuration, RUNTIME)
    return reused


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_CHANGE, min_size=1, max_size=8))
def test_reuse_equals_fresh_and_nothing_is_modified_over_generated_changes(certs, changes):  # noqa: F811
    c = base(certs)
    caches, detector = Caches(), MutationDetector()
    step(c, caches, detector)
    for change in changes:
        apply(c, change)
        step(c, caches, detector)


def _reviewer(c) -> IngressReviewer:
    store = Store(INDEXERS)
    for obj in c.ingresses.values():
        store.add(obj)

    def snapshot_of(ingresses):  # like the controller's partial snapshot
        return replace(c.snapshot(), ingresses=tuple(ingresses))

    return IngressReviewer(store, snapshot_of, OPTIONS, lambda: True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_CHANGE, min_size=1, max_size=6))
def test_another_owner_does_not_change_what_the_controller_reuses(certs, changes):  # noqa: F811
    controller, other = base(certs), base(certs)
    caches = Caches()
    first = build(controller.snapshot(), OPTIONS, caches)
    entries = len(caches.translation)
    # The webhook reviews generated Ingresses (it translates without a
    # Caches) and another owner builds a diverging cluster with its own.
    reviewer, others = _reviewer(controller), Caches()
    for change in changes:
        apply(other, change)
        build(other.snapshot(), OPTIONS, others)
        if change[0] == "put ingress":
            obj = other.ingresses[f"default/{change[1]}"]
            reviewer.review(AdmissionRequest(uid="u", group="networking.k8s.io", version="v1", kind="Ingress",
                                             operation="CREATE", namespace="default", name=change[1], object=obj))
    assert len(caches.translation) == entries  # nobody else wrote into the controller's caches
    again = build(controller.snapshot(), OPTIONS, caches)
    assert again == first
    # Everything is reused: the same Server and Backend objects as the first build.
    assert all(a is b for a, b in zip(again.configuration.servers, first.configuration.servers))
    assert all(a is b for a, b in zip(again.configuration.backends, first.configuration.backends))
