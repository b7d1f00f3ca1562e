"""A translation that reuses earlier work equals a fresh one, change after change.

``translate.build`` reuses the results of pure steps (per Ingress object, per
Service and its slices, per location, server and backend) across builds, and
the view and renderer reuse per-server work in turn. The contract is that
none of this shows: after any sequence of changes (add, delete or modify an
Ingress, Service, EndpointSlice, Secret or the ConfigMap) the result equals a
translation of the same objects that reuses nothing, and renders to the same
bytes. "Fresh" here is a deep copy of the snapshot (no object the caches have
seen) translated without a ``caches.Caches``.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest

from platformd import paths
from platformd.ingress import routes, translate
from platformd.ingress.caches import Caches
from platformd.ingress.render import render_nginx_conf
from platformd.ingress.snapshot import Snapshot, key_of
from platformd.ingress.translate import TranslateOptions, build
from platformd.ingress.view import RuntimePaths
from tests.helpers.certs import self_signed
from tests.ingress_e2e import objects as o

NOW = time.time() + 3600  # the test certificates are valid from their creation on, for 30 days
OPTIONS = TranslateOptions(default_backend_service="default/fallback", default_ssl_certificate="default/tls-default",
                           now=NOW)
CACHES = Caches()  # reused across the whole module, as the controller keeps one
ROUTE_TABLE = routes.RouteTable()
RUNTIME = RuntimePaths(Path("/tmp/pd-test"), paths.lua_dir(), Path("/tmp/pd-test/c.pem"), Path("/tmp/pd-test/k.pem"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, tuple[str, str]]:
    directory = tmp_path_factory.mktemp("certs")
    return {host: self_signed(host, directory) for host in ("a.example", "b.example", "default.example")}


class Cluster:
    """The objects a controller's stores would hold; a change replaces an object, as the API does."""

    def __init__(self, certs: dict[str, tuple[str, str]]) -> None:
        self.certs = certs
        self.ingresses: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.slices: dict[str, tuple[dict, ...]] = {}
        self.secrets: dict[str, dict] = {}
        self.configmap: dict | None = None
        self.created = 0

    def put_ingress(self, obj: dict, created: str | None = None) -> None:
        if created is None:
            self.created += 1
            created = f"2024-01-01T00:00:{self.created:02d}Z"
        obj["metadata"]["creationTimestamp"] = created
        self.ingresses[key_of(obj)] = obj

    def put_service(self, name: str, port: int = 80, addresses: tuple[str, ...] | None = ("10.0.0.1",)) -> None:
        self.services[f"default/{name}"] = o.service(name, port=port)
        if addresses is not None:
            self.slices[f"default/{name}"] = (o.endpoint_slice(name, addresses),)

    def put_secret(self, name: str, host: str) -> None:
        self.secrets[f"default/{name}"] = o.tls_secret(name, *self.certs[host])

    def snapshot(self) -> Snapshot:
        return Snapshot(ingresses=tuple(self.ingresses.values()), ingress_classes=(o.ingress_class(),),
                        services=dict(self.services), endpoint_slices=dict(self.slices),
                        secrets=dict(self.secrets), configmap=self.configmap)


def base(certs) -> Cluster:
    c = Cluster(certs)
    for name in ("s1", "s2", "s3", "s4", "fallback", "other", "p1", "p2", "f1"):
        c.put_service(name, addresses=("10.0.0.%d" % (len(c.services) + 1),))
    c.put_service("empty", addresses=())
    c.put_secret("tls-a", "a.example")
    c.put_secret("tls-default", "default.example")
    c.put_ingress(o.ingress("a", "a.example", [("/", "s1", 80), ("/api", "s2", 80)],
                            tls=[{"hosts": ["a.example"], "secretName": "tls-a"}]))
    c.put_ingress(o.ingress("b", "b.example", [("/", "s2", 80), ("/exact", "s4", 80, "Exact")],
                            annotations={"proxy-body-size": "8m", "server-alias": "www.b.example"}))
    c.put_ingress(o.ingress("canary", "a.example", [("/", "s3", 80)],
                            annotations={"canary": "true", "canary-weight": "30"}))
    c.put_ingress(o.ingress("catchall", None, [("/", "s1", 80), ("/x", "s4", 80)]))
    c.put_ingress(o.ingress("fallback-user", "e.example", [("/", "empty", 80)],
                            annotations={"default-backend": "other"}))
    c.put_ingress(o.ingress("ewma", "c.example", [("/", "s2", 80)], annotations={"load-balance": "ewma"}))
    c.put_ingress(o.ingress("conflict", "a.example", [("/api", "s4", 80)]))  # a's /api is older
    # Plain hosts: nothing another host's step decides reaches them, so
    # their steps are replayed (translate._HostStep) until an input changes.
    c.put_ingress(o.ingress("plain", "p.example", [("/", "p1", 80), ("/v", "p2", 80)]))
    c.put_ingress(o.ingress("plain-2", "q.example", [("/", "p2", 80)]))
    c.put_ingress(o.ingress("bad", "d.example", [("/", "s1", 80)], annotations={"configuration-snippet": "x"}))
    return c


FIELDS = ("ingresses", "ingress_classes", "services", "endpoint_slices", "secrets", "configmap")
MAPPINGS = ("services", "endpoint_slices", "secrets")


def fresh(snap: Snapshot, options: TranslateOptions = OPTIONS) -> translate.Translation:
    return build(Snapshot(**{name: copy.deepcopy(getattr(snap, name) if name not in MAPPINGS else dict(getattr(snap, name)))
                             for name in FIELDS}), options)  # no caches: nothing reused


def _frozen_copy(snap: Snapshot) -> dict:
    return {name: copy.deepcopy(getattr(snap, name) if name not in MAPPINGS else dict(getattr(snap, name)))
            for name in FIELDS}


def check(c: Cluster) -> translate.Translation:
    snap = c.snapshot()
    # Mutation detector (after client-go's cache mutation detector): the
    # caches rest on store objects never being modified, so translating and
    # building the route table must leave every object as it was.
    before = _frozen_copy(snap)
    reused = build(snap, OPTIONS, CACHES)
    ROUTE_TABLE.payload(reused.configuration)
    assert _frozen_copy(snap) == before, "translation modified a store object"
    expected = fresh(snap)
    assert reused == expected
    assert render_nginx_conf(reused.configuration, RUNTIME) == render_nginx_conf(expected.configuration, RUNTIME)
    # The route table reused across the whole sequence (as render keeps one) vs a fresh one.
    assert ROUTE_TABLE.payload(reused.configuration) == routes.payload(expected.configuration)
    return reused


def _modify(c: Cluster, key: str, change) -> None:
    obj = copy.deepcopy(c.ingresses[key])
    change(obj)
    c.ingresses[key] = obj


CHANGES = {
    "add ingress": lambda c: c.put_ingress(o.ingress("new", "new.example", [("/", "s1", 80), ("/n", "s4", 80)])),
    "add ingress on an existing host": lambda c: c.put_ingress(o.ingress("more", "b.example", [("/more", "s3", 80)])),
    "add older ingress taking a path": lambda c: c.put_ingress(
        o.ingress("older", "a.example", [("/api", "other", 80)]), created="2023-01-01T00:00:00Z"),
    "add older ingress on an earlier host sharing a backend": lambda c: c.put_ingress(
        o.ingress("first", "0.example", [("/", "s2", 80)], annotations={"load-balance": "ewma"}),
        created="2023-06-01T00:00:00Z"),
    "add canary to another host": lambda c: c.put_ingress(o.ingress(
        "canary-b", "b.example", [("/", "s3", 80)], annotations={"canary": "true", "canary-weight": "50"})),
    "add ingress using the default backend service": lambda c: c.put_ingress(
        o.ingress("nodefault", "f.example", [("/only", "f1", 80, "Exact")])),
    "modify ingress path": lambda c: _modify(c, "default/a", lambda obj: obj["spec"]["rules"][0]["http"]["paths"].append(
        {"path": "/v2", "pathType": "Prefix", "backend": {"service": {"name": "s3", "port": {"number": 80}}}})),
    "modify ingress annotation": lambda c: _modify(c, "default/b", lambda obj: obj["metadata"]["annotations"].update(
        {o.PREFIX + "proxy-body-size": "16m"})),
    "modify canary weight": lambda c: _modify(c, "default/canary", lambda obj: obj["metadata"]["annotations"].update(
        {o.PREFIX + "canary-weight": "70"})),
    "fix refused annotation": lambda c: _modify(c, "default/bad", lambda obj: obj["metadata"].pop("annotations")),
    "modify endpoint slice of a plain host": lambda c: c.slices.update(
        {"default/p1": (o.endpoint_slice("p1", ["10.8.8.8"]),)}),
    "modify service of a plain host": lambda c: c.put_service("p1", port=81, addresses=None),
    "add plain ingress on an earlier host taking a plain backend": lambda c: c.put_ingress(
        o.ingress("earlier", "0p.example", [("/", "p2", 80)], annotations={"load-balance": "ewma"})),
    "modify service port": lambda c: c.put_service("s2", port=81, addresses=None),
    "modify endpoint slice": lambda c: c.slices.update({"default/s1": (o.endpoint_slice("s1", ["10.9.9.9", "10.9.9.8"]),)}),
    "empty endpoint slice": lambda c: c.slices.update({"default/empty": (o.endpoint_slice("empty", ["10.7.7.7"]),)}),
    "modify secret": lambda c: c.put_secret("tls-a", "b.example"),  # no longer covers a.example
    "add configmap": lambda c: setattr(c, "configmap", {
        "metadata": {"name": "cfg", "namespace": "default"}, "data": {"ssl-redirect": "false", "proxy-body-size": "2m"}}),
    "modify configmap": lambda c: setattr(c, "configmap", {
        "metadata": {"name": "cfg", "namespace": "default"}, "data": {"load-balance": "ewma"}}),
    "delete ingress": lambda c: c.ingresses.pop("default/b"),
    "delete canary": lambda c: c.ingresses.pop("default/canary"),
    "delete service": lambda c: c.services.pop("default/s4"),
    "delete endpoint slice": lambda c: c.slices.pop("default/s2"),
    "delete endpoint slice of a plain host": lambda c: c.slices.pop("default/p2"),
    "delete plain ingress": lambda c: c.ingresses.pop("default/plain"),
    "delete secret": lambda c: c.secrets.pop("default/tls-a"),
}


def test_the_base_cluster_exercises_what_the_changes_touch(certs):
    result = check(base(certs))
    reasons = {p.reason for p in result.problems}
    assert {"PathConflict", "InvalidAnnotation"} <= reasons
    config = result.configuration
    assert {s.hostname for s in config.servers} >= {"a.example", "b.example", "c.example", "e.example"}
    assert any(b.alternative_backends for b in config.backends)  # the canary is merged
    assert config.default_server_locations and config.default_certificate == "default/tls-default"


@pytest.mark.parametrize("name", list(CHANGES))
def test_each_change_gives_what_a_fresh_translation_gives(certs, name):
    c = base(certs)
    before = check(c)  # warms every cache on the base
    CHANGES[name](c)
    changed = check(c)
    assert changed != before  # each change is visible in the result
    assert check(c) == changed  # and translating the same objects again changes nothing


def test_a_sequence_of_changes_stays_equal_to_fresh_translations(certs):
    c = base(certs)
    check(c)
    for name in CHANGES:  # in order: the deletions come last
        CHANGES[name](c)
        check(c)
    # Back to objects equal to the start: nothing stale is reused.
    check(base(certs))


def test_a_change_of_options_gives_what_a_fresh_translation_gives(certs):
    """Options are inputs too: a host without a "/" of its own gets the default backend service's."""
    c = base(certs)
    CHANGES["add ingress using the default backend service"](c)  # a host without a "/"
    snap = c.snapshot()
    plain = TranslateOptions(now=NOW)
    without = build(snap, plain, CACHES)
    assert without == fresh(snap, plain)
    with_default = build(snap, OPTIONS, CACHES)
    assert with_default == fresh(snap, OPTIONS)
    assert without != with_default
    assert build(snap, plain, CACHES) == without


# --- the controller's incremental path (platformd.ingress.incremental) ---------------
#
# The controller translates only the neighbourhood of what changed and
# splices it into its last configuration. Driven through the real Controller
# (its informer handlers, indexes, neighbourhood and splice; the informers'
# sinks are fed directly, so each step is deterministic), every sync's
# result must equal a fresh full translation of the same objects, after
# random sequences of changes of every kind.

import random

from platformd.common import resources
from platformd.common.informer import InformerFactory
from platformd.common.store import index_ingress_by_service
from platformd.ingress import incremental
from platformd.ingress.controller import Controller, ControllerOptions
from platformd.ingress.dataplane import ApplyResult
from platformd.ingress.render import dynamic_sections
from tests.common.memsource import MemorySource

# Pools a few times the number of Ingresses: most changes have a small
# neighbourhood (as in a real cluster), some share hosts and Services.
HOSTS = ("a.example", "b.example", "x.w.example", "y.w.example", "www.a.example",
         *(f"h{i}.example" for i in range(25)))
SERVICES = (*(f"s{i}" for i in range(30)), "fallback")
ANNOTATIONS = (
    {}, {}, {}, {}, {}, {}, {"proxy-body-size": "8m"}, {"load-balance": "ewma"}, {"ssl-redirect": "false"},
    {"canary": "true", "canary-weight": "30"}, {"canary": "true", "canary-by-header": "x-canary"},
    {"app-root": "/start"}, {"configuration-snippet": "x"},  # refused: contributes nothing
    # per-route settings of the annotation groups (lanes, traffic, limits, affinity)
    {"proxy-http-version": "1.0"}, {"proxy-buffer-size": "16k"}, {"limit-rpm": "120"},
    {"x-forwarded-prefix": "/p", "enable-access-log": "false"}, {"proxy-next-upstream-tries": "2"},
    {"session-cookie-secure": "true", "session-cookie-expires": "60"},
)
CROSSING = ({"server-alias": "www.a.example"}, {"default-backend": "s4"},  # reach other hosts: a full build
            {"from-to-www-redirect": "true"}, {"custom-http-errors": "404,503", "default-backend": "s5"})


class _Plane:
    """Renders what it is given with the controller's caches, as the data plane does."""

    running = None
    sections = ()

    def __init__(self, caches: Caches) -> None:
        self.caches = caches

    def submit(self, config):
        self.running = config
        self.sections = dynamic_sections(config, self.caches)
        return lambda superseded=None: ApplyResult("dynamic")


class _Fed:
    """A Controller whose informers are fed by the test, and the objects they hold."""

    def __init__(self, options: TranslateOptions) -> None:
        caches = Caches()
        self.controller = Controller(InformerFactory(MemorySource()), _Plane(caches),
                                     ControllerOptions(translate=options, configmap="default/cfg"), caches=caches)
        c = self.controller
        self.sinks = {resources.INGRESSES: c.ingresses, resources.INGRESS_CLASSES: c.classes,
                      resources.SERVICES: c.services, resources.ENDPOINT_SLICES: c.slices,
                      resources.TLS_SECRETS: c.secrets, resources.CONFIGMAPS: c.configmaps}

    def put(self, resource, obj: dict) -> None:
        self.sinks[resource]._dispatcher.add(obj)

    def delete(self, resource, key: str) -> None:
        obj = self.sinks[resource].store.get(key)
        if obj is not None:
            self.sinks[resource]._dispatcher.delete(obj)

    def snapshot(self) -> Snapshot:
        return self.controller._snapshot()


def _random_ingress(rnd: random.Random, name: str, certs_hosts: tuple[str, ...], crossing: float = 0.02) -> dict:
    """An Ingress of random shape; ``crossing``: the odds of each feature that
    reaches beyond its own hosts (those make the next syncs full builds)."""
    chosen = rnd.choice(CROSSING) if rnd.random() < crossing else rnd.choice(ANNOTATIONS)
    annotations = {o.PREFIX + k: v for k, v in chosen.items()}
    rules = []
    for _ in range(rnd.choice((1, 1, 1, 1, 2))):
        host = None if rnd.random() < crossing else rnd.choice(HOSTS)
        service = "fallback" if rnd.random() < crossing / 4 else rnd.choice(SERVICES[:-1])
        paths = [(rnd.choice(("/", "/api", "/v", "/x/y")), service, 80,
                  rnd.choice(("Prefix", "Prefix", "Exact", "ImplementationSpecific")))
                 for _ in range(rnd.choice((1, 1, 2)))]
        rules.append((host, paths))
    obj = o.ingress(name, rules[0][0], rules[0][1], annotations=annotations or None)
    for host, paths in rules[1:]:
        extra = o.ingress(name, host, paths)["spec"]["rules"]
        obj["spec"]["rules"] += extra
    roll = rnd.random()
    if roll < 0.15:
        host = rnd.choice(certs_hosts)
        obj["spec"]["tls"] = [{"hosts": [host], "secretName": f"tls-{host.split('.')[0]}"}]
    elif roll < 0.15 + crossing:
        obj["spec"]["tls"] = [{"hosts": ["*.w.example"], "secretName": "tls-a"}]
    elif roll < 0.15 + 2 * crossing:
        obj["spec"]["defaultBackend"] = {"service": {"name": rnd.choice(SERVICES), "port": {"number": 80}}}
    obj["metadata"]["creationTimestamp"] = f"2024-01-01T00:00:{rnd.randrange(60):02d}Z"
    return obj


def _random_change(rnd: random.Random, fed: _Fed, certs, serial: int) -> None:
    roll = rnd.random()
    store = fed.controller.ingresses.store
    keys = sorted(store.keys())
    if roll < 0.3 or not keys:
        fed.put(resources.INGRESSES, _random_ingress(rnd, f"ing-{serial}", tuple(certs)))
    elif roll < 0.5:
        key = rnd.choice(keys)
        fed.put(resources.INGRESSES, _random_ingress(rnd, key.split("/")[1], tuple(certs)))
    elif roll < 0.6:
        # Mostly one that reaches beyond its hosts, if any: while one is
        # there, changes near it are full builds, and the test is about splices.
        crossing = [k for k in keys if incremental.crosses(store.get(k))
                    or "default/fallback" in index_ingress_by_service(store.get(k))]
        fed.delete(resources.INGRESSES, rnd.choice(crossing if crossing and rnd.random() < 0.8 else keys))
    elif roll < 0.7:
        name = rnd.choice(SERVICES)
        fed.put(resources.SERVICES, o.service(name, port=rnd.choice((80, 80, 81))))
    elif roll < 0.74:
        fed.delete(resources.SERVICES, f"default/{rnd.choice(SERVICES)}")
    elif roll < 0.84:
        name = rnd.choice(SERVICES)
        fed.put(resources.ENDPOINT_SLICES, o.endpoint_slice(name, [f"10.1.{serial % 250}.{k}" for k in
                                                                    range(rnd.randrange(3))]))
    elif roll < 0.9:
        host = rnd.choice(tuple(certs))
        other = rnd.choice(tuple(certs))
        fed.put(resources.TLS_SECRETS, o.tls_secret(f"tls-{host.split('.')[0]}", *certs[other]))
    elif roll < 0.96:
        fed.delete(resources.TLS_SECRETS, f"default/tls-{rnd.choice(tuple(certs)).split('.')[0]}")
    elif roll < 0.98:
        fed.put(resources.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "cfg", "namespace": "default"},
                                       "data": {"ssl-redirect": rnd.choice(("true", "false"))}})
    elif roll < 0.99:
        fed.put(resources.INGRESS_CLASSES, o.ingress_class(default=rnd.random() < 0.5))


@pytest.mark.parametrize("options", [OPTIONS, TranslateOptions(now=NOW)], ids=["with-defaults", "plain"])
@pytest.mark.parametrize("seed", range(6))
def test_incremental_syncs_equal_fresh_translations_over_random_changes(certs, monkeypatch, options, seed):
    rnd = random.Random(seed)
    spliced = []
    real_splice = incremental.splice

    def counting(*args):
        result = real_splice(*args)
        spliced.append(result is not None)
        return result

    monkeypatch.setattr(incremental, "splice", counting)
    fed = _Fed(options)
    fed.put(resources.INGRESS_CLASSES, o.ingress_class())
    for name in SERVICES:
        fed.put(resources.SERVICES, o.service(name))
        fed.put(resources.ENDPOINT_SLICES, o.endpoint_slice(name, [f"10.0.0.{SERVICES.index(name) + 1}"]))
    for host in ("a.example", "b.example", "default.example"):
        fed.put(resources.TLS_SECRETS, o.tls_secret(f"tls-{host.split('.')[0]}", *certs[host]))
    for i in range(12):
        fed.put(resources.INGRESSES, _random_ingress(rnd, f"base-{i}", ("a.example", "b.example"), crossing=0))
    controller = fed.controller
    controller.sync()
    for step in range(100):
        for _ in range(rnd.choice((1, 1, 1, 2, 3))):
            _random_change(rnd, fed, {h: certs[h] for h in ("a.example", "b.example")}, step)
        controller.sync_endpoints()  # as the endpoint runner does, before or after
        controller.sync()
        expected = fresh(fed.snapshot(), options)
        assert controller.translation == expected, f"step {step}"
        assert routes.payload(controller.translation.configuration) == routes.payload(expected.configuration)
        # What the data plane pushes (route shards patched by what changed, backends) equals a fresh render.
        assert [(x.name, x.checksum) for x in fed.controller.plane.sections] == \
            [(x.name, x.checksum) for x in dynamic_sections(expected.configuration)]
    assert sum(spliced) >= 5, "the incremental path was hardly taken: the test tests the full build"


def test_neighbourhood_of_a_plain_change_is_its_host_and_services():
    """A new Ingress on a host of its own, with Services of its own, is translated alone."""
    ing = o.ingress("new", "new.example", [("/", "s-new", 80)])
    other = o.ingress("other", "other.example", [("/", "s-other", 80)])
    stores = {incremental.HOST: {"new.example": [ing], "other.example": [other]},
              incremental.SERVICE: {"default/s-new": [ing], "default/s-other": [other]}}
    changes = incremental.Changes()
    changes.ingress(None, ing)
    hood = incremental.neighbourhood(changes, {"default/new": ing}.get,
                                     lambda kind, value: stores.get(kind, {}).get(value, []), TranslateOptions())
    assert hood is not None and set(hood.ingresses) == {"default/new"}
    assert hood.hosts == {"new.example"} and hood.services == {"default/s-new"}


@pytest.mark.parametrize("change", [
    {"metadata": {"annotations": {o.PREFIX + "server-alias": "www.x"}}},
    {"spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}},
    {"spec": {"rules": [{"http": {"paths": []}}]}},
    {"spec": {"rules": [{"host": "a.w.example"}], "tls": [{"hosts": ["*.w.example"]}]}},
])
def test_an_ingress_reaching_beyond_its_hosts_is_translated_with_everything(change):
    obj = {"metadata": {"name": "x", "namespace": "default", **change.get("metadata", {})},
           "spec": change.get("spec", {"rules": [{"host": "a.example"}]})}
    changes = incremental.Changes()
    changes.ingress(obj, None)  # deleted: its hosts are gone from the store
    assert changes.everything
    assert incremental.neighbourhood(changes, lambda key: None, lambda kind, value: [], TranslateOptions()) is None
    changes = incremental.Changes()
    changes.ingress(None, obj)  # added: found crossing in the store
    assert incremental.neighbourhood(changes, {"default/x": obj}.get, lambda kind, value: [],
                                     TranslateOptions()) is None
