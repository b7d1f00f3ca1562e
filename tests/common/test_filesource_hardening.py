"""#15: the file source refuses what an API server would, and never blocks.

Reproductions: wrong-typed fields (``spec: {rules: ["x"]}``) raised
``AttributeError`` in every sync; a FIFO named ``*.yaml`` blocked the folder
scan forever; an anchor bomb inside an annotation value expanded to +340 MB.
"""

from __future__ import annotations

import copy
import os
import threading

import pytest
import yaml

from platformd.common import filesource
from platformd.common.filesource import FileSource, ManifestError, parse_manifests
from platformd.common.resources import INGRESSES, SERVICES
from platformd.common.store import index_endpointslice_by_service
from platformd.ingress.snapshot import Snapshot
from platformd.ingress.translate import TranslateOptions, build

VALID = [
    {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"},
     "spec": {"controller": "k8s.io/platform-ingress"}},
    {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
     "metadata": {"name": "app", "namespace": "default", "labels": {"team": "a"},
                  "annotations": {"nginx.ingress.kubernetes.io/ssl-redirect": "false"}},
     "spec": {"ingressClassName": "platform",
              "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
              "tls": [{"hosts": ["a.example"], "secretName": "tls"}],
              "rules": [{"host": "a.example", "http": {"paths": [
                  {"path": "/", "pathType": "Prefix",
                   "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
     "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1",
              "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}},
    {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
     "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
     "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
     "endpoints": [{"addresses": ["10.1.0.1"], "conditions": {"ready": True}}]},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": "default"},
     "type": "kubernetes.io/tls", "data": {"tls.crt": "eA==", "tls.key": "eA=="}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"},
     "data": {"ssl-redirect": "false"}},
]

# One value of each JSON class; a variant puts each where another class belongs.
CLASSES = {"string": "x", "integer": 7, "boolean": True, "list": ["x"], "object": {"x": "y"}}


def _class_of(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _paths(value, prefix=()):
    """Every field path below ``value`` (apiVersion/kind/name excluded: they address the object)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        path = (*prefix, key)
        if path in (("apiVersion",), ("kind",), ("metadata",), ("metadata", "name"), ("metadata", "namespace")):
            if path != ("metadata",):
                continue
        else:
            yield path
        yield from _paths(item, path)


def _set(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def _variants():
    for index, base in enumerate(VALID):
        for path in _paths(base):
            current = base
            for key in path:
                current = current[key]
            for name, wrong in CLASSES.items():
                if name != _class_of(current):
                    yield index, path, name, wrong


VARIANTS = list(_variants())


def _snapshot(objects) -> Snapshot:
    by_kind: dict[str, list[dict]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    key = lambda o: f"{o['metadata']['namespace']}/{o['metadata']['name']}"  # noqa: E731
    slices: dict[str, tuple] = {}
    for s in by_kind.get("EndpointSlice", []):
        for svc in index_endpointslice_by_service(s):
            slices[svc] = slices.get(svc, ()) + (s,)
    return Snapshot(ingresses=tuple(by_kind.get("Ingress", [])),
                    ingress_classes=tuple(by_kind.get("IngressClass", [])),
                    services={key(s): s for s in by_kind.get("Service", [])}, endpoint_slices=slices,
                    secrets={key(s): s for s in by_kind.get("Secret", [])},
                    configmap=(by_kind.get("ConfigMap") or [None])[0])


def test_the_variants_cover_every_field_and_class():
    # 6 kinds, every field path, every other JSON class: the issue's 31 and more.
    assert len(VARIANTS) > 200
    assert {name for _, _, name, _ in VARIANTS} == set(CLASSES)


@pytest.mark.parametrize("index,path,name,wrong", VARIANTS,
                         ids=[f"{VALID[i]['kind']}.{'.'.join(map(str, p))}={n}" for i, p, n, _ in VARIANTS])
def test_a_wrong_typed_field_is_a_file_problem_or_harmless(index, path, name, wrong):
    objects = copy.deepcopy(VALID)
    _set(objects[index], path, copy.deepcopy(wrong))
    text = yaml.safe_dump_all(objects)
    try:
        parsed = parse_manifests("m.yaml", text)
    except ManifestError as exc:
        # Refused: the message names the file, the object and the field.
        assert exc.path == "m.yaml" and exc.line > 0
        assert ".".join(str(p) for p in path if not isinstance(p, int)).split(".")[-1] in exc.problem
        return
    # Accepted (the API would accept it too: an int-or-string, an unknown
    # field, a free-form map): the translation must take it in its stride.
    build(_snapshot([obj for _, obj in parsed]), TranslateOptions(now=1893456000.0))


def test_the_issue_reproduction_gives_one_clear_problem(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: bad}\nspec: {rules: [x]}\n")
    (tmp_path / "good.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {}\n")
    source = FileSource(str(tmp_path))
    try:
        assert [o["metadata"]["name"] for o in source.list(SERVICES, None).items] == ["web"]
        assert source.list(INGRESSES, None).items == []
        problems = source.problems()
        assert list(problems) == [str(tmp_path / "bad.yaml")]
        assert "spec.rules[0]: must be an object, not a string" in problems[str(tmp_path / "bad.yaml")]
    finally:
        source.close()


def test_a_fifo_named_yaml_never_blocks_the_scan(tmp_path):
    os.mkfifo(tmp_path / "trap.yaml")
    (tmp_path / "good.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {}\n")
    source = FileSource(str(tmp_path))
    done = threading.Event()

    def scan():
        source.scan()
        done.set()

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    try:
        assert done.wait(10), "the scan blocked on the FIFO"
        assert [o["metadata"]["name"] for o in source.list(SERVICES, None).items] == ["web"]
        assert "not a regular file" in source.problems()[str(tmp_path / "trap.yaml")]
    finally:
        source.close()


def test_symlinked_files_are_still_read(tmp_path):
    """ConfigMap volumes link every file to ..data/<name>: links to regular files are fine."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "svc.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n")
    (tmp_path / "svc.yaml").symlink_to(tmp_path / "data" / "svc.yaml")
    objects = [o for _, o in parse_manifests("x", (tmp_path / "svc.yaml").read_text())]
    assert objects and filesource._read_regular(str(tmp_path / "svc.yaml")).startswith("apiVersion")


BOMB = """\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: bomb
  annotations:
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
spec: {}
"""


def test_an_anchor_bomb_is_refused_with_a_clear_problem():
    with pytest.raises(ManifestError) as err:
        parse_manifests("bomb.yaml", BOMB)
    assert "aliases expand" in err.value.problem and err.value.line == 1


def test_modest_anchors_are_fine():
    text = """\
apiVersion: v1
kind: Service
metadata: {name: a, labels: &labels {team: a, tier: web}}
spec: {selector: *labels}
"""
    [(_, obj)] = parse_manifests("ok.yaml", text)
    assert obj["spec"]["selector"] == {"team": "a", "tier": "web"}


def test_a_recursive_alias_is_refused():
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: r}\ndata: &d {x: *d}\n"
    with pytest.raises(ManifestError):
        parse_manifests("r.yaml", text)
