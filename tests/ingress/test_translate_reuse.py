"""Translations reuse what did not change (caches.Caches) and still see every change."""

from __future__ import annotations

from platformd.ingress import translate
from platformd.ingress.caches import Caches
from platformd.ingress.snapshot import Snapshot
from platformd.ingress.translate import TranslateOptions, build
from tests.ingress_e2e import objects as o

OPTIONS = TranslateOptions()
CACHES = Caches()  # one owner across the module, as the controller


def snapshot(ingresses, services, slices) -> Snapshot:
    return Snapshot(ingresses=tuple(ingresses), ingress_classes=(o.ingress_class(),),
                    services={f"default/{s['metadata']['name']}": s for s in services},
                    endpoint_slices={f"default/{s['metadata']['labels']['kubernetes.io/service-name']}": (s,)
                                     for s in slices})


def fresh_build(snap: Snapshot) -> translate.Translation:
    """A translation that reuses nothing."""
    return build(snap, OPTIONS)  # no caches


def endpoints_of(translation, backend):
    return [e.address for b in translation.configuration.backends if b.name == backend for e in b.endpoints]


def test_reuse_gives_what_a_fresh_translation_gives_and_shares_unchanged_objects():
    ingresses = [o.ingress(f"i{i}", f"h{i}.example", [("/", f"s{i}", 80)]) for i in range(3)]
    services = [o.service(f"s{i}") for i in range(3)]
    slices = [o.endpoint_slice(f"s{i}", [f"10.0.0.{i + 1}"]) for i in range(3)]
    first = build(snapshot(ingresses, services, slices), OPTIONS, CACHES)
    grown = snapshot([*ingresses, o.ingress("new", "new.example", [("/", "s0", 80)])], services, slices)
    second = build(grown, OPTIONS, CACHES)
    assert second == fresh_build(grown)
    before = {s.hostname: s for s in first.configuration.servers}
    after = {s.hostname: s for s in second.configuration.servers}
    assert all(after[h] is before[h] for h in before)  # the view can reuse their views by identity


def test_changed_objects_are_translated_again():
    ingresses = [o.ingress("a", "a.example", [("/", "s", 80)])]
    services = [o.service("s")]
    first = build(snapshot(ingresses, services, [o.endpoint_slice("s", ["10.0.0.1"])]), OPTIONS, CACHES)
    assert endpoints_of(first, "default.s.80") == ["10.0.0.1"]
    moved = build(snapshot(ingresses, services, [o.endpoint_slice("s", ["10.0.0.2"])]), OPTIONS, CACHES)
    assert endpoints_of(moved, "default.s.80") == ["10.0.0.2"]
    renumbered = build(snapshot(ingresses, [o.service("s", port=81)], [o.endpoint_slice("s", ["10.0.0.2"])]), OPTIONS, CACHES)
    assert endpoints_of(renumbered, "default.s.80") == []  # the Service has no port 80 any more
    annotated = [o.ingress("a", "a.example", [("/", "s", 80)],
                           annotations={o.PREFIX + "proxy-body-size": "8m"})]
    resized = build(snapshot(annotated, services, [o.endpoint_slice("s", ["10.0.0.2"])]), OPTIONS, CACHES)
    assert resized.configuration.servers[0].locations[0].proxy.body_size == "8m"
    tls = [o.ingress("a", "a.example", [("/", "s", 80)], tls=[{"hosts": ["a.example"]}])]
    secured = build(snapshot(tls, services, []), OPTIONS, CACHES)
    assert secured.configuration.servers[0].tls and secured.configuration.servers[0].locations[0].ssl_redirect
