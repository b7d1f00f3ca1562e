import gc
import json
import sys
import os
import threading
import time
import tracemalloc

import pytest
import yaml

from platformd.common import errors
from platformd.common.filesource import FileSource, ManifestError, parse_manifests
from platformd.common.informer import DeletedFinalStateUnknown, InformerFactory
from platformd.common.resources import CONFIGMAPS, INGRESSES, NODES, SERVICES
from tests.helpers.waiting import wait_for

SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: {name}
spec:
  ports: [{{port: {port}}}]
"""


def write(path, text):
    # Write a new file and rename it over the old one, as editors and
    # ConfigMap volume updates do; the inode changes even within one mtime tick.
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------- parsing


def test_parses_multi_document_files_and_lists_and_defaults_namespaces():
    text = """\
apiVersion: v1
kind: Service
metadata: {name: web, creationTimestamp: 2024-01-01T00:00:00Z}
---
# an empty document is fine
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1, namespace: ignored}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: skipped}
- apiVersion: networking.k8s.io/v1
  kind: Ingress
  metadata: {name: ing, namespace: team}
"""
    found = parse_manifests("m.yaml", text)
    assert [(r, o["metadata"]) for r, o in found] == [
        (SERVICES, {"name": "web", "namespace": "default", "creationTimestamp": "2024-01-01T00:00:00Z"}),
        (NODES, {"name": "n1"}),
        (INGRESSES, {"name": "ing", "namespace": "team"}),
    ]


@pytest.mark.parametrize("text, line, problem", [
    ("apiVersion: v1\nkind: Service\nmetadata:\n  name: [a\n", 5, "invalid YAML"),
    ("a: b\n  c: d\n", 2, "invalid YAML"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\n- just\n- a list\n", 5, "not an object"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\n", 5,
     "without metadata.name"),
    ("kind: Service\nmetadata: {name: a}\n", 1, "without apiVersion and kind"),
])
def test_malformed_manifests_name_file_and_line(text, line, problem):
    with pytest.raises(ManifestError) as info:
        parse_manifests("dir/bad.yaml", text)
    assert info.value.path == "dir/bad.yaml"
    assert info.value.line == line
    assert problem in str(info.value)
    assert str(info.value).startswith(f"dir/bad.yaml:{line}: ")


# ---------------------------------------------------------------- list / watch


def test_list_gives_synthetic_versions_and_uids(tmp_path):
    write(tmp_path / "a.yaml", SERVICE.format(name="a", port=80))
    write(tmp_path / "b.yml", SERVICE.format(name="b", port=81))
    write(tmp_path / "ignored.txt", SERVICE.format(name="c", port=82))
    source = FileSource(str(tmp_path))
    try:
        page = source.list(SERVICES, None, limit=500)
        assert sorted(o["metadata"]["name"] for o in page.items) == ["a", "b"]
        assert page.continue_token == ""
        rvs = {int(o["metadata"]["resourceVersion"]) for o in page.items}
        assert len(rvs) == 2 and int(page.resource_version) >= max(rvs)
        assert len({o["metadata"]["uid"] for o in page.items}) == 2
        assert source.list(SERVICES, "other", limit=500).items == []
        assert source.list(CONFIGMAPS, None, limit=500).items == []
    finally:
        source.close()


def test_watch_from_a_forgotten_version_is_expired(tmp_path):
    source = FileSource(str(tmp_path), history_limit=4)
    try:
        source.list(SERVICES, None, limit=0)
        for i in range(10):
            write(tmp_path / f"s{i}.yaml", SERVICE.format(name=f"s{i}", port=80))
            source.scan()
        with pytest.raises(errors.ResourceExpired):
            source.watch(SERVICES, None, resource_version="1", timeout_seconds=1)
        with pytest.raises(errors.ResourceExpired):
            source.watch(SERVICES, None, resource_version="not-a-number", timeout_seconds=1)
        events = []
        stream = source.watch(SERVICES, None, resource_version="9", timeout_seconds=0.2)
        for event in stream:
            events.append((event.type, event.object["metadata"]["name"]))
        assert events == [("ADDED", "s9")]
    finally:
        source.close()


def test_watch_close_from_another_thread_ends_iteration(tmp_path):
    source = FileSource(str(tmp_path))
    try:
        page = source.list(SERVICES, None, limit=0)
        stream = source.watch(SERVICES, None, resource_version=page.resource_version, timeout_seconds=60)
        threading.Timer(0.1, stream.close).start()
        started = time.monotonic()
        assert list(stream) == []
        assert time.monotonic() - started < 2
    finally:
        source.close()


# ---------------------------------------------------------------- through an informer


class View:
    def __init__(self):
        self.objects = {}
        self.tombstones = 0

    def on_add(self, obj):
        self.objects[obj["metadata"]["name"]] = obj

    def on_update(self, old, new):
        self.objects[new["metadata"]["name"]] = new

    def on_delete(self, obj):
        if isinstance(obj, DeletedFinalStateUnknown):
            self.tombstones += 1
            obj = obj.obj
        del self.objects[obj["metadata"]["name"]]

    def ports(self):
        return {name: obj["spec"]["ports"][0]["port"] for name, obj in self.objects.items()}


@pytest.fixture
def watched(tmp_path):
    write(tmp_path / "a.yaml", SERVICE.format(name="a", port=80))
    source = FileSource(str(tmp_path), poll_interval=0.05)
    factory = InformerFactory(source)
    view = View()
    factory.informer(SERVICES).add_handler(view)
    factory.start()
    assert factory.wait_for_sync(5)
    yield tmp_path, source, view
    factory.stop()
    source.close()


def test_picks_up_added_changed_and_removed_files(watched):
    folder, source, view = watched
    assert view.ports() == {"a": 80}
    uid = view.objects["a"]["metadata"]["uid"]
    write(folder / "b.yaml", SERVICE.format(name="b", port=81))
    assert wait_for(lambda: view.ports() == {"a": 80, "b": 81})
    write(folder / "a.yaml", SERVICE.format(name="a", port=8080))
    assert wait_for(lambda: view.ports() == {"a": 8080, "b": 81})
    assert view.objects["a"]["metadata"]["uid"] == uid  # same object, new version
    os.remove(folder / "b.yaml")
    assert wait_for(lambda: view.ports() == {"a": 8080})
    # a file holding two objects; one of them is later dropped from it
    write(folder / "two.yaml", SERVICE.format(name="c", port=1) + "---\n" + SERVICE.format(name="d", port=2))
    assert wait_for(lambda: view.ports() == {"a": 8080, "c": 1, "d": 2})
    write(folder / "two.yaml", SERVICE.format(name="c", port=1))
    assert wait_for(lambda: view.ports() == {"a": 8080, "c": 1})
    assert view.tombstones == 0  # every change came through the watch


def test_survives_a_malformed_file_and_keeps_last_good_state(watched, caplog):
    folder, source, view = watched
    write(folder / "b.yaml", SERVICE.format(name="b", port=81))
    assert wait_for(lambda: view.ports() == {"a": 80, "b": 81})

    # A new file that is broken is reported with its line and ignored.
    write(folder / "broken.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: [x\n")
    assert wait_for(lambda: str(folder / "broken.yaml") in source.problems())
    assert source.problems()[str(folder / "broken.yaml")].startswith(f"{folder / 'broken.yaml'}:5:")
    assert f"{folder / 'broken.yaml'}:5:" in caplog.text

    # A bad edit to a serving file keeps its last good objects...
    write(folder / "b.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: b\n")
    assert wait_for(lambda: str(folder / "b.yaml") in source.problems())
    write(folder / "a.yaml", SERVICE.format(name="a", port=8080))  # other files keep working
    assert wait_for(lambda: view.ports() == {"a": 8080, "b": 81})

    # ...until it is fixed,
    write(folder / "b.yaml", SERVICE.format(name="b", port=82))
    assert wait_for(lambda: view.ports() == {"a": 8080, "b": 82})
    assert str(folder / "b.yaml") not in source.problems()
    # or removed.
    os.remove(folder / "b.yaml")
    os.remove(folder / "broken.yaml")
    assert wait_for(lambda: view.ports() == {"a": 8080})
    assert source.problems() == {}


def test_duplicate_objects_first_file_wins(watched, caplog):
    folder, source, view = watched
    write(folder / "z.yaml", SERVICE.format(name="a", port=9))
    assert wait_for(lambda: "also defined in" in caplog.text)
    assert view.ports() == {"a": 80}
    os.remove(folder / "a.yaml")
    assert wait_for(lambda: view.ports() == {"a": 9})


def test_an_earlier_file_takes_over_a_duplicate_and_hands_it_back(tmp_path):
    write(tmp_path / "m.yaml", SERVICE.format(name="a", port=80) + "---\n" + SERVICE.format(name="b", port=81))
    source = FileSource(str(tmp_path))
    source.scan()
    ports = lambda: {o["metadata"]["name"]: o["spec"]["ports"][0]["port"]  # noqa: E731
                     for o in source.list(SERVICES, None).items}
    assert ports() == {"a": 80, "b": 81}
    uid = source.list(SERVICES, None).items[0]["metadata"]["uid"]
    write(tmp_path / "a.yaml", SERVICE.format(name="a", port=9))  # sorts first: wins
    source.scan()
    assert ports() == {"a": 9, "b": 81}
    os.remove(tmp_path / "a.yaml")
    source.scan()
    assert ports() == {"a": 80, "b": 81}
    assert source.list(SERVICES, None).items[0]["metadata"]["uid"] == uid  # never deleted meanwhile
    os.remove(tmp_path / "m.yaml")
    source.scan()
    assert ports() == {}
    source.close()


def test_a_scan_touches_only_the_objects_of_changed_files(tmp_path):
    big = "---\n".join(SERVICE.format(name=f"s{i}", port=80) for i in range(50))
    write(tmp_path / "big.yaml", big)
    write(tmp_path / "small.yaml", SERVICE.format(name="x", port=1))
    source = FileSource(str(tmp_path))
    source.scan()
    version = int(source.list(SERVICES, None).resource_version)
    compared = []
    original = source._reassign
    source._reassign = lambda previous, changed: compared.extend(original(previous, changed)) or dict.fromkeys(compared)
    source.scan()  # nothing changed
    assert compared == []
    write(tmp_path / "small.yaml", SERVICE.format(name="x", port=2))
    source.scan()
    assert [object_id[1] for object_id in compared] == ["default/x"]
    assert int(source.list(SERVICES, None).resource_version) == version + 1
    source.close()


# ---------------------------------------------------------------- what it keeps


def test_parsed_strings_are_interned():
    text = SERVICE.format(name="a", port=80) + "---\n" + SERVICE.format(name="b", port=81)
    (_, a), (_, b) = parse_manifests("m.yaml", text)
    # Keys and repeated values are one object each, however many objects hold them.
    assert [k for k in a] == [k for k in b] and all(x is y for x, y in zip(a, b))
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["apiVersion"] is b["apiVersion"] and a["kind"] is b["kind"]


def test_rewriting_a_file_with_the_same_objects_publishes_nothing(tmp_path):
    write(tmp_path / "a.yaml", SERVICE.format(name="a", port=80))
    source = FileSource(str(tmp_path))
    try:
        source.scan()
        (before,) = source.list(SERVICES, None).items
        version = source.list(SERVICES, None).resource_version
        # Same content in a new file (new inode), and one that only sets
        # fields the source owns: what is served would not change.
        write(tmp_path / "a.yaml", SERVICE.format(name="a", port=80))
        source.scan()
        write(tmp_path / "a.yaml", SERVICE.format(name="a", port=80).replace(
            "  name: a\n", "  name: a\n  uid: someone-elses\n  resourceVersion: '7'\n"))
        source.scan()
        page = source.list(SERVICES, None)
        assert page.resource_version == version and page.items[0] is before
        assert before["metadata"]["uid"] != "someone-elses"
        write(tmp_path / "a.yaml", SERVICE.format(name="a", port=81))
        source.scan()
        (after,) = source.list(SERVICES, None).items
        assert after["spec"]["ports"][0]["port"] == 81
        assert int(after["metadata"]["resourceVersion"]) == int(version) + 1
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["metadata"]["creationTimestamp"] == before["metadata"]["creationTimestamp"]
    finally:
        source.close()


def test_the_source_keeps_one_copy_of_what_it_serves(tmp_path):
    """A file read again holds no second parsed copy of objects it serves."""
    text = "---\n".join(SERVICE.format(name=f"s{i}", port=80) for i in range(300))
    write(tmp_path / "big.yaml", text)
    source = FileSource(str(tmp_path), history_limit=10)
    try:
        source.scan()
        gc.collect()
        tracemalloc.start()
        try:
            one_parse = tracemalloc.get_traced_memory()[0]
            parsed = parse_manifests("big.yaml", text)
            one_parse = tracemalloc.get_traced_memory()[0] - one_parse
            del parsed
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            write(tmp_path / "big.yaml", text)  # new inode: read and parsed again
            source.scan()
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(source.list(SERVICES, None).items) == 300
        # What stays is bookkeeping per id (the new read's ids, ~150 bytes
        # each); a second copy of the objects would be all of ``one_parse``
        # (these objects are small: their ports lists are shared, see interning).
        assert kept < one_parse / 3, (kept, one_parse)
    finally:
        source.close()


# Scalars of every YAML type, merge keys, aliases, non-string keys, custom
# collection tags: the direct build (filesource._build) must give what
# PyYAML's constructor gives, or leave the document to it.
EQUIVALENCE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: types
  labels: {a: "1", b: x}
  annotations: &notes {k: v, "2024-01-01T00:00:00Z": t}
data:
  int: 1
  float: 1.5
  bool: true
  nothing: null
  tilde: ~
  when: 2024-01-01T00:00:00Z
  octal: 0o17
  list: [1, "2", [3, {x: y}], {}]
  again: *notes
  empty: ""
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: merged
  labels: &base {a: "1"}
data:
  <<: *base
  b: "2"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: intkeys
data:
  1: one
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: set
data: !!set {a, b}
"""


def test_direct_build_equals_pyyaml_constructor():
    import yaml

    from platformd.common.filesource import _build, _ManifestLoader, _NeedsConstructor

    expected = list(yaml.load_all(EQUIVALENCE, Loader=_ManifestLoader))
    loader, built, direct = _ManifestLoader(EQUIVALENCE), [], []
    while loader.check_node():
        node = loader.get_node()
        try:
            built.append(_build(node, loader))
            direct.append(True)
        except _NeedsConstructor:
            built.append(loader.construct_document(node))
            direct.append(False)
    loader.dispose()
    assert built == expected
    assert direct == [True, False, False, False]  # merge key, int key, !!set: the constructor's
    data = built[0]["data"]
    assert data["when"] == "2024-01-01T00:00:00Z"  # timestamps stay strings
    assert (data["int"], data["float"], data["bool"], data["nothing"], data["octal"]) == (1, 1.5, True, None, "0o17")  # YAML 1.1: a string
    assert built[1]["data"] == {"a": "1", "b": "2"}
    assert data["list"][1] is sys.intern("2")  # interned, as the constructor's strings


# ---------------------------------------------------------------- JSON manifests


def test_a_json_manifest_gives_what_the_same_yaml_gives(tmp_path):
    """A file that is one JSON object (a List here) takes the JSON parser; the
    objects, their normalisation and their interning are those of the YAML path."""
    docs = [yaml.safe_load(SERVICE.format(name=n, port=80 + i)) for i, n in enumerate("ab")]
    docs[1]["metadata"].pop("namespace", None)  # defaulted as from YAML
    listed = {"apiVersion": "v1", "kind": "List", "items": docs}
    from_json = parse_manifests("m.json", json.dumps(listed, indent=1))
    from_yaml = parse_manifests("m.yaml", yaml.safe_dump(listed))
    assert from_json == from_yaml and [r for r, _ in from_json] == [SERVICES, SERVICES]
    (_, a), (_, b) = from_json
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"] == "default"
    assert a["apiVersion"] is b["apiVersion"]


def test_json_that_is_not_json_is_read_as_yaml_or_refused_with_its_line(tmp_path):
    # A YAML flow mapping looks like JSON but is not: the YAML parser reads it.
    (_, obj), = parse_manifests("m.yaml", "{apiVersion: v1, kind: Service, metadata: {name: a}, spec: {ports: []}}")
    assert obj["metadata"] == {"name": "a", "namespace": "default"}
    with pytest.raises(ManifestError) as err:
        parse_manifests("m.json", '{"apiVersion": "v1",\n "kind": "Service", "metadata": {"name": \n')
    assert err.value.path == "m.json" and err.value.line >= 1
    with pytest.raises(ManifestError, match="without metadata.name"):
        parse_manifests("m.json", '{"apiVersion": "v1", "kind": "Service", "metadata": {}}')


def test_json_files_in_the_folder_are_served(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(yaml.safe_load(SERVICE.format(name="j", port=80))))
    source = FileSource(str(tmp_path))
    try:
        source.scan()
        (served,) = source.list(SERVICES, None).items
        assert served["metadata"]["name"] == "j" and served["metadata"]["uid"]
    finally:
        source.close()
