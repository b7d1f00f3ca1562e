"""A folder of YAML manifests as a list/watch source.

``FileSource(directory)`` serves the objects found in ``*.yaml``/``*.yml``/
``*.json`` files directly in ``directory`` (multi-document files and
``kind: List`` included; a file that is one JSON object is read by the
JSON parser, about 25 times faster than YAML) through the same ``list``/``watch`` interface as ``ApiSource``, so
an ``InformerFactory`` runs unchanged on files: for running without a
cluster, for demos and for tests.

How it behaves:

- The folder is polled every ``poll_interval`` seconds (0.5 s by default: fast
  enough for someone editing a file, and a stat per file is cheap). A file
  is re-read when its mtime, size or inode changes; the inode catches editors
  that replace a file by renaming a new one over it.
- Every change gets a new synthetic ``resourceVersion`` from one counter for
  the whole folder, and each object a ``uid`` that stays the same for as long
  as the object exists. Objects of namespaced kinds without a namespace get
  ``default``; cluster-scoped objects lose any namespace they were given.
- A file that does not parse (or holds a document that is not an object of
  a kind we know how to address) is reported once, with its name and line,
  and ignored. A file that *becomes* malformed keeps serving its last good
  objects: a bad edit never deletes what is serving. Removing the file does.
- Kinds we do not know (not in ``resources.ALL``) are skipped silently;
  a folder may well hold Deployments next to our Ingresses.
- The same object in two files: the first file in name order wins, and the
  duplicate is reported (when either file changes).
- A scan costs a stat per file plus work in proportion to the files that
  changed: each object id keeps the sorted list of files that define it, so
  only the objects of changed files are re-decided and compared. At 50,000
  objects with a 20 ms poll, re-merging the whole folder on every scan would
  keep a core busy and delay every event by the merge.
- Watches see the events since the given resourceVersion; a version older
  than the kept history (``history_limit`` events) gets ``ResourceExpired``,
  so reflectors relist exactly as they would against an API server.
- An object gets a new resourceVersion (and an event) only when what is
  served would change, as with an API server's no-op update: a file that is
  rewritten with the same content, or a manifest that only sets ``uid`` or
  ``resourceVersion`` (ours win), publishes nothing.

Memory: the source keeps one parsed copy of each object, the one it serves,
which informers store and share (they must not modify it). A file's own
record of an object is that served object while the file is the one serving
it; only the losing copies of duplicates and the objects of a file that has
just been read are separate. Strings are interned as they are parsed, so the
keys and repeated values (namespaces, kinds, ``TCP``) of 50,000 objects are
each held once: that is most of the difference between YAML's one string
per scalar and ``json.loads`` (which shares keys within one document only).
History entries point at the served objects and add about 70 bytes each.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import yaml

from platformd.common import errors, gcpause, interning, objectschema, resources
from platformd.common.reflector import ADDED, DELETED, MODIFIED, ListPage, WatchEvent
from platformd.common.resources import Resource
from platformd.common.store import key_of

log = logging.getLogger(__name__)

_SUFFIXES = (".yaml", ".yml", ".json")
_JSON_START = re.compile(r"\s*\{")
# A manifest file larger than this is refused unread: 50,000 objects of a
# benchmark folder take 50 MB, and a file is read whole into memory.
MAX_FILE_BYTES = 128 * 1024 * 1024
# YAML aliases share one node; the objects we serve are trees that every
# consumer (comparisons, JSON, copies) walks in full. A document may expand
# to at most ALIAS_EXPANSION times the nodes it is written with (and any
# document to ALIAS_FREE_NODES): "billion laughs" (9 aliases of 9 aliases...)
# expands by 10^8 and is refused, while anchors that share a block of labels
# stay well inside it.
ALIAS_EXPANSION = 10
ALIAS_FREE_NODES = 10_000


class _ManifestLoader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """Safe YAML without timestamp conversion: ``2024-01-01T00:00:00Z`` stays a
    string, as it would be in JSON from the API server."""


_ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _interned_str(loader: yaml.constructor.BaseConstructor, node: yaml.Node) -> str:
    # YAML makes a new string for every scalar, keys included: 1.4 million
    # strings for 50,000 small objects. Interned, every key and every
    # repeated value (namespace, kind, "TCP") is one object; that is about
    # a third of what the parsed objects cost.
    return sys.intern(loader.construct_scalar(node))


_ManifestLoader.add_constructor("tag:yaml.org,2002:str", _interned_str)

_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


class _NeedsConstructor(Exception):
    """A node the direct build leaves to PyYAML's constructor (merge keys, keys that are not strings)."""


def _build(node: yaml.Node, loader: _ManifestLoader) -> object:
    """The document under ``node``, built directly from the composed nodes.

    Why: PyYAML's constructor (Python, two passes, a resolver and a
    generator per mapping) was two thirds of parsing a manifest folder, and
    parsing most of a cold start (10,000 Ingresses = 50,000 objects: 1.36 s
    of CPU per 10,000 documents through ``construct_document``, 0.93 s
    built here, bench/bench_ingress.py). Strings, mappings with string keys
    and sequences are built here (strings interned, as ``_interned_str``);
    every other scalar goes to the loader's own constructor, and a document
    with a merge key or a non-string key raises ``_NeedsConstructor`` so the
    caller builds it the usual way. An alias gives a copy, not the same
    object (the aliases were bounded by ``_check_expansion`` first).
    """
    tag = node.tag
    if tag == _STR:
        return sys.intern(node.value)
    if tag == _MAP:
        built = {}
        for key, value in node.value:
            if key.tag != _STR:
                raise _NeedsConstructor
            name = sys.intern(key.value)
            if name in interning.UNIQUE_KEYS and value.tag == _STR:
                item = value.value  # as decoded JSON is (see interning)
            else:
                item = _build(value, loader)
            if name in interning.SHARED_KEYS and item.__class__ in (dict, list):
                item = interning.share(item)  # as decoded JSON is (see interning)
            built[name] = item
        return built
    if tag == _SEQ:
        return [_build(item, loader) for item in node.value]
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_object(node, deep=True)
    raise _NeedsConstructor


class ManifestError(ValueError):
    """A file that cannot be used, with ``path`` and 1-based ``line`` (0 if unknown)."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


_ObjectId = tuple[Resource, str]  # (resource, namespace/name key)


def parse_manifests(path: str, text: str) -> list[tuple[Resource, dict]]:
    """The objects in one manifest file, with the resource each belongs to.

    Raises ``ManifestError`` for YAML errors and for documents that are not
    Kubernetes objects. Objects of unknown kinds are left out. The returned
    dicts are new and the caller's; they are normalised (namespace defaulted
    or removed), nothing else. Strings in them are interned.
    """
    found: list[tuple[Resource, dict]] = []
    doc = _json_document(text)
    if doc is not None:
        for item in _items(path, 1, doc):
            parsed = _object(path, 1, item)
            if parsed is not None:
                found.append(parsed)
        return found
    loader = _ManifestLoader(text)
    # An alias needs an anchor ("&name"): text without one cannot expand, and
    # counting nodes costs as much as parsing (20,000 objects: +2.5 s).
    may_alias = "&" in text
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            line = node.start_mark.line + 1
            if may_alias:
                _check_expansion(path, line, node)
            try:
                doc = _build(node, loader)
            except _NeedsConstructor:
                doc = loader.construct_document(node)
            if doc is None:
                continue
            for item in _items(path, line, doc):
                parsed = _object(path, line, item)
                if parsed is not None:
                    found.append(parsed)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(path, mark.line + 1 if mark is not None else 0,
                            f"invalid YAML: {problem}") from None
    finally:
        loader.dispose()
    return found


def _items(path: str, line: int, doc: object) -> list:
    """The objects of one document: its items if it is a ``kind: List``."""
    if isinstance(doc, dict) and doc.get("kind") == "List" and "items" in doc:
        items = doc["items"] or []
        if not isinstance(items, list):
            raise ManifestError(path, line, "kind: List with items that are not a list")
        return items
    return [doc]


def _json_document(text: str) -> object | None:
    """The document of a file that is one JSON object, or None (then it is YAML).

    Why: JSON is YAML too, but ``json.loads`` parses it some 25 times faster
    than the YAML path (50,000 objects: 0.25 s against 5 s, most of a
    cold start from a folder). Keys are shared within the file by the
    decoder, values interned as YAML scalars are. Text that is not valid
    JSON (a YAML flow mapping, say) is left to the YAML parser, which gives
    the error message if it is invalid there too.
    """
    if not _JSON_START.match(text):
        return None
    try:
        with gcpause.paused:  # see apisource.parse_list: a third of the parse otherwise
            doc = interning.loads(text)
    except ValueError:
        return None
    return doc


def _check_expansion(path: str, line: int, root: yaml.Node) -> None:
    """Refuse a document whose aliases expand it beyond the bound above.

    Counts each node once (``written``) and as often as aliases repeat it
    (``expanded``), in one pass over the distinct nodes; a node that
    contains itself is refused too (it would never serialize).
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            children = _children(node)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ManifestError(path, line, "invalid YAML: an alias refers to a node that contains it")
        open_nodes.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                raise ManifestError(path, line, "invalid YAML: an alias refers to a node that contains it")
            if id(child) not in sizes:
                stack.append((child, False))
    written, expanded = len(sizes), sizes[id(root)]
    if expanded > max(ALIAS_FREE_NODES, ALIAS_EXPANSION * written):
        raise ManifestError(path, line, f"YAML aliases expand this document from {written} to {expanded} nodes "
                                        f"(at most {ALIAS_EXPANSION}x or {ALIAS_FREE_NODES}); refused")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _object(path: str, line: int, item: object) -> tuple[Resource, dict] | None:
    if not isinstance(item, dict):
        raise ManifestError(path, line, f"document is a {type(item).__name__}, not an object")
    api_version, kind = item.get("apiVersion"), item.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ManifestError(path, line, "object without apiVersion and kind")
    meta = item.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ManifestError(path, line, f"{kind} without metadata.name")
    resource = resources.for_kind(api_version, kind)
    if resource is None:
        log.debug("%s:%d: skipping %s %s (kind not served)", path, line, api_version, kind)
        return None
    # What an API server's decoder refuses never reaches a controller there;
    # here neither (a string where a rule belongs broke every sync).
    wrong = objectschema.problem(api_version, kind, item)
    if wrong is not None:
        raise ManifestError(path, line, f"{kind} {meta['name']}: {wrong}")
    # Normalised in place: the document was parsed just now and is ours.
    if resource.namespaced:
        meta["namespace"] = meta.get("namespace") or "default"
    else:
        meta.pop("namespace", None)
    return resource, item


def _by_id(objects: list[tuple[Resource, dict]]) -> dict[_ObjectId, dict]:
    """The first object of each id, in document order."""
    by_id: dict[_ObjectId, dict] = {}
    for resource, manifest in objects:
        by_id.setdefault((resource, key_of(manifest)), manifest)
    return by_id


@dataclass
class _FileState:
    """What one file defines: its last good objects, by id, in document order.

    An entry is the file's manifest, or, while this file is the one serving
    the object, the served object itself (our ``uid``, ``resourceVersion``
    and ``creationTimestamp`` added), so the source holds no second copy of
    what it serves. Serving either again gives the same object.
    """

    fingerprint: tuple[int, int, int]  # (mtime_ns, size, inode)
    by_id: dict[_ObjectId, dict] = field(default_factory=dict, repr=False)
    error: str | None = None  # problem with the current content, if any


@dataclass(frozen=True, slots=True)
class _Change:
    resource_version: int
    resource: Resource
    type: str
    object: dict


class FileSource:
    """A folder of manifests as a reflector ``Source`` (see the module docstring).

    The folder is read on the first ``list``/``watch`` and then polled by a
    daemon thread until ``close()``. ``scan()`` polls once, synchronously.
    """

    def __init__(self, directory: str, *, poll_interval: float = 0.5,
                 history_limit: int = 10_000) -> None:
        self.directory = directory
        self.poll_interval = poll_interval
        self._history_limit = history_limit
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._scan_lock = threading.Lock()  # one scan at a time
        self._start_lock = threading.Lock()
        self._files: dict[str, _FileState] = {}
        # Files defining each object, sorted by path: the first one wins.
        # Tuples: one path almost always, and a 1-tuple is half a list.
        self._owners: dict[_ObjectId, tuple[str, ...]] = {}
        self._objects: dict[_ObjectId, dict] = {}  # as served (with rv and uid)
        self._resource_version = 0
        # uids: "xxxxxxxx-xxxx-4xxx-8xxx-" (random, per source) + a 12-digit hex counter.
        self._uid_prefix = str(uuid.uuid4())[:24]
        self._uid_counter = 0
        self._history: list[_Change] = []
        self._forgotten_before = 0  # events with a resourceVersion <= this are no longer kept
        self._closed = threading.Event()
        self._poller: threading.Thread | None = None
        self._missing_reported = False

    # ---- Source

    def list(self, resource: Resource, namespace: str | None, *,
             limit: int = 0, continue_token: str = "", resource_version: str = "") -> ListPage:
        """Everything at once, the current state: a source may ignore ``limit``
        and ``resource_version``, as the API server's watch cache may."""
        self._ensure_started()
        with self._lock:
            collection = resource.collection
            items = [obj for (res, _), obj in self._objects.items()
                     if res == collection and _in_namespace(obj, namespace) and resource.selects(obj)]
            return ListPage(items, str(self._resource_version))

    def watch(self, resource: Resource, namespace: str | None, *,
              resource_version: str, timeout_seconds: int) -> _FileWatch:
        self._ensure_started()
        try:
            since = int(resource_version or 0)
        except ValueError:
            raise errors.ResourceExpired(410, f"resourceVersion {resource_version!r} is not ours",
                                         "Expired") from None
        with self._lock:
            if since < self._forgotten_before:
                raise errors.ResourceExpired(410, f"too old resource version: {since}", "Expired")
        return _FileWatch(self, resource, namespace, since, timeout_seconds)

    # ---- polling

    def problems(self) -> dict[str, str]:
        """Files whose current content is ignored, with the reason (file:line: problem)."""
        with self._lock:
            return {path: state.error for path, state in self._files.items() if state.error}

    def scan(self) -> None:
        """Read the folder once and publish what changed."""
        with self._scan_lock:
            files = self._read_folder()
            if files is None:
                return
            with self._lock:
                previous, self._files = self._files, files
                # _read_folder keeps the state object of an unchanged file.
                changed = sorted(p for p in previous.keys() | files.keys() if previous.get(p) is not files.get(p))
                if changed:
                    self._publish(self._reassign(previous, changed))

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._changed.notify_all()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(2.0)

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._poller is None:
                self.scan()  # the first list must see the whole folder
                self._poller = threading.Thread(
                    target=self._poll_loop, daemon=True,
                    name=f"filesource-{os.path.basename(self.directory)}")
                self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closed.wait(self.poll_interval):
            try:
                self.scan()
            except Exception:
                log.exception("scanning %s failed", self.directory)

    def _read_folder(self) -> dict[str, _FileState] | None:
        """New file states; None if the folder cannot be read (keep what we have)."""
        try:
            names = sorted(n for n in os.listdir(self.directory)
                           if n.endswith(_SUFFIXES) and not n.startswith("."))
        except OSError as exc:
            if not self._missing_reported:
                log.warning("cannot read manifest folder %s: %s", self.directory, exc.strerror or exc)
                self._missing_reported = True
            return None
        self._missing_reported = False
        with self._lock:
            previous = dict(self._files)
        files: dict[str, _FileState] = {}
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                st = os.stat(path)  # follows symlinks: ConfigMap volumes link every file
            except OSError:
                continue  # removed between listdir and stat
            fingerprint = (st.st_mtime_ns, st.st_size, st.st_ino)
            old = previous.get(path)
            if old is not None and old.fingerprint == fingerprint:
                files[path] = old
                continue
            files[path] = self._read_file(path, fingerprint, old)
        return files

    @staticmethod
    def _read_file(path: str, fingerprint: tuple[int, int, int], old: _FileState | None) -> _FileState:
        # A copy: the new state's entries change as it starts serving them.
        def last_good() -> dict[_ObjectId, dict]:
            return dict(old.by_id) if old is not None else {}

        try:
            text = _read_regular(path)
            objects = parse_manifests(path, text)
        except ManifestError as exc:
            log.warning("ignoring %s (keeping its last good objects)", exc)
            return _FileState(fingerprint, last_good(), str(exc))
        except (OSError, UnicodeDecodeError) as exc:
            message = f"{path}: cannot read: {exc}"
            log.warning("ignoring %s", message)
            return _FileState(fingerprint, last_good(), message)
        if old is not None and old.error:
            log.info("%s is valid again", path)
        return _FileState(fingerprint, _by_id(objects))

    def _reassign(self, previous: dict[str, _FileState], changed: list[str]) -> dict[_ObjectId, None]:
        """Update ``_owners`` for the ``changed`` files; the object ids they touch (lock held)."""
        affected: dict[_ObjectId, None] = {}  # ordered: events follow file and document order
        for path in changed:
            old, new = previous.get(path), self._files.get(path)
            before = old.by_id if old is not None else {}
            after = new.by_id if new is not None else {}
            for object_id in before.keys() - after.keys():
                owners = tuple(p for p in self._owners[object_id] if p != path)
                if owners:
                    self._owners[object_id] = owners
                else:
                    del self._owners[object_id]
            for object_id in after:
                if object_id not in before:
                    owners = self._owners.get(object_id, ())
                    at = bisect.bisect_left(owners, path)
                    self._owners[object_id] = (*owners[:at], path, *owners[at:])
            affected.update(dict.fromkeys(before))
            affected.update(dict.fromkeys(after))
        for object_id in affected:
            owners = self._owners.get(object_id)
            if owners is not None and len(owners) > 1:
                for other in owners[1:]:
                    log.warning("%s: %s %s is also defined in %s; using that one",
                                other, object_id[0].kind, object_id[1], owners[0])
        return affected

    def _publish(self, affected: dict[_ObjectId, None]) -> None:
        """Turn the difference to what is served for ``affected`` into events (lock held)."""
        changes = 0
        now: str | None = None  # one string for every object created by this scan
        for object_id in affected:
            owners = self._owners.get(object_id)
            if owners is None:
                if object_id in self._objects:
                    self._delete(object_id)
                    changes += 1
                continue
            winner = self._files[owners[0]]
            served = self._objects.get(object_id)
            if served is not None:
                served_meta = served["metadata"]
                uid, created = served_meta["uid"], served_meta.get("creationTimestamp")
                version = served_meta["resourceVersion"]
            else:
                uid, version = self._new_uid(), None
                created = now = now or _now()
            obj = _stamped(winner.by_id[object_id], uid, version, created)
            if served is not None and obj == served:
                winner.by_id[object_id] = served  # drop the new parse: keep one copy
                continue
            self._resource_version += 1
            obj["metadata"]["resourceVersion"] = str(self._resource_version)
            winner.by_id[object_id] = obj
            self._objects[object_id] = obj
            self._record(object_id[0], MODIFIED if served is not None else ADDED, obj)
            changes += 1
        if changes:
            self._changed.notify_all()

    def _new_uid(self) -> str:
        """A uid in UUID form, unique in this process and across restarts:
        a random prefix per source, then a counter. (``uuid4`` per object,
        an ``os.urandom`` call and a UUID object each, was a tenth of
        reading 50,000 objects.)"""
        self._uid_counter += 1
        return f"{self._uid_prefix}{self._uid_counter:012x}"

    def _delete(self, object_id: _ObjectId) -> None:
        served = self._objects.pop(object_id)
        self._resource_version += 1
        obj = {**served, "metadata": {**served["metadata"],
                                      "resourceVersion": str(self._resource_version)}}
        self._record(object_id[0], DELETED, obj)

    def _record(self, resource: Resource, kind: str, obj: dict) -> None:
        self._history.append(_Change(self._resource_version, resource, kind, obj))
        if len(self._history) > self._history_limit:
            # Drop the older half at once, so trimming is amortised O(1).
            cut = len(self._history) - self._history_limit // 2
            self._forgotten_before = self._history[cut - 1].resource_version
            del self._history[:cut]

    def _changes_after(self, since: int) -> list[_Change]:
        """History entries newer than ``since`` (lock held)."""
        if since < self._forgotten_before:
            raise errors.ResourceExpired(410, f"too old resource version: {since}", "Expired")
        start = bisect.bisect_right(self._history, since, key=lambda c: c.resource_version)
        return self._history[start:]


def _read_regular(path: str) -> str:
    """The text of ``path`` if it is a regular file (after symlinks).

    Opened non-blocking and checked on the open descriptor: a FIFO named
    ``x.yaml`` would otherwise block the scan forever in ``open`` or
    ``read``, and a check before ``open`` could be raced by a rename.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(path, 0, "not a regular file; ignored")
        if st.st_size > MAX_FILE_BYTES:
            raise ManifestError(path, 0, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; ignored")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError(path, 0, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; ignored")
    return data.decode("utf-8")


def _stamped(manifest: dict, uid: str, version: str | None, created: str | None) -> dict:
    """``manifest`` as served: a new top-level and metadata dict (the rest is
    shared) with our ``uid`` and ``resourceVersion``, and ``created`` unless
    the manifest has its own ``creationTimestamp``."""
    meta = dict(manifest["metadata"])
    meta.setdefault("creationTimestamp", created)
    meta["uid"] = uid
    meta["resourceVersion"] = version
    return {**manifest, "metadata": meta}


def _in_namespace(obj: dict, namespace: str | None) -> bool:
    return namespace is None or obj["metadata"].get("namespace") == namespace


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _FileWatch:
    """Events of one resource after a resourceVersion, until timeout or close()."""

    def __init__(self, source: FileSource, resource: Resource, namespace: str | None,
                 since: int, timeout_seconds: float) -> None:
        self._source = source
        self._resource = resource
        self._namespace = namespace
        self._since = since
        self._deadline = time.monotonic() + timeout_seconds
        self._closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        source = self._source
        while True:
            with source._lock:
                while True:
                    if self._closed or source._closed.is_set():
                        return
                    changes = source._changes_after(self._since)
                    if changes:
                        break
                    remaining = self._deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    source._changed.wait(remaining)
            self._since = changes[-1].resource_version
            for change in changes:
                if change.resource == self._resource.collection and _in_namespace(change.object, self._namespace) \
                        and self._resource.selects(change.object):
                    yield WatchEvent(change.type, change.object)

    def close(self) -> None:
        with self._source._lock:
            self._closed = True
            self._source._changed.notify_all()
