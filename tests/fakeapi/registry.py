"""The verbs: create, get, update, patch, delete, list and watch, with the real
server's semantics layered on `Storage`.

This is where server-owned metadata is stamped (uid, creationTimestamp,
generation), defaults are applied (`defaults`), objects are validated
(`validation`), optimistic concurrency is checked, status subresources are
kept apart from the main resource, finalizers delay deletion, and list
paging/resourceVersion rules are applied (`listing`).

Every write happens under the storage lock, so read-check-write is atomic.
"""

from __future__ import annotations

import copy
import json
import random
import time
import uuid
from dataclasses import replace
from typing import Callable

from . import apply, conversion, defaults, patching, selectors, strategic, webhooks
from .errors import (ApiError, already_exists, bad_request, conflict, expired, invalid_object,
                     not_found, stale_update, too_large_resource_version)
from .listing import ListOptions, decode_continue, encode_continue, invalid_list_options
from .resources import REGISTRY, ResourceType, resolve
from .storage import Snapshot, Storage, Watcher, clone, key_of, to_json
from .validation import validate, validate_update

# generateName suffix alphabet: no vowels (no accidental words) and no look-alikes.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# How long a list asking for a future resourceVersion waits before 504 (real: 3 s).
TOO_LARGE_RV_WAIT = 3.0

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _content(obj: dict) -> dict:
    """Everything but metadata and status: what `generation` counts changes of."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _check_preconditions(rt: ResourceType, obj: dict, pre: dict) -> None:
    """DeleteOptions.preconditions: 409 when the object is not the one meant."""
    meta = obj["metadata"]
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        if pre.get(field) and pre[field] != meta.get(field):
            raise conflict(rt, meta["name"], f"Precondition failed: {label} in precondition: "
                                             f"{pre[field]}, {label} in object meta: {meta.get(field)}")


class ListPage:
    """One page of a list: `metadata` and the items as (object, JSON) pairs.

    The objects are shared with storage (read-only); a JSON of b"" means the
    item was made for this page (a converted view) and is encoded on demand."""

    def __init__(self, rt: ResourceType, metadata: dict, entries: list[tuple[dict, bytes]]):
        self.rt = rt
        self.metadata = metadata
        self.entries = entries

    def objects(self) -> list[dict]:
        """The items, read-only."""
        return [obj for obj, _ in self.entries]

    def items(self) -> list[dict]:
        """Private copies of the items."""
        return [json.loads(raw) if raw else clone(obj) for obj, raw in self.entries]

    def json(self) -> bytes:
        """The list response body, byte for byte what `json.dumps` of the list
        dict with compact separators gives, built from each item's stored JSON."""
        head = to_json({"kind": self.rt.list_kind, "apiVersion": self.rt.api_version,
                        "metadata": self.metadata})
        items = b",".join(raw or to_json(obj) for obj, raw in self.entries)
        return head[:-1] + b',"items":[' + items + b"]}"


class Registry:
    """The semantics of each verb. Methods take plain dicts and return ones the
    caller owns, except `list_page`, whose items are shared with storage."""

    def __init__(self, storage: Storage,
                 on_namespace_terminating: Callable[[str], None] | None = None):
        self.storage = storage
        # Called (outside no lock guarantees) when a namespace starts terminating;
        # the server schedules `finalize_namespace` like the namespace controller.
        self.on_namespace_terminating = on_namespace_terminating or (lambda name: None)
        # Validating admission (webhooks.py): after validation, before storage.
        self.admit = webhooks.ValidatingWebhooks(self)
        # Whether lists may be served by the API server's watch cache (see
        # _read_for_list); off models --watch-cache=false or a resource without one.
        self.watch_cache = True
        # First pages served, by where from: the watch cache or etcd (a quorum
        # or exact read: the expensive kind the reflector avoids).
        self.list_reads = {"cache": 0, "etcd": 0}

    # --- storage access (converting views such as events.k8s.io Events) -------------------

    def _load(self, rt: ResourceType, namespace: str, name: str) -> dict | None:
        return conversion.from_storage(rt, self.storage.get(rt, namespace, name))

    def _load_all(self, rt: ResourceType, at_rv: int | None = None) -> list[dict]:
        """Every object of a type as served, now or as of `at_rv`: read-only (shared with storage)."""
        return [conversion.from_storage(rt, o) for o in self.storage.objects(rt, at_rv)]

    def _store(self, rt: ResourceType, type_: str, obj: dict, prev: dict | None) -> dict:
        stored = self.storage.write(rt, type_, conversion.to_storage(rt, obj),
                                    conversion.to_storage(rt, prev) if prev else None)
        return conversion.from_storage(rt, stored)

    # --- helpers --------------------------------------------------------------------------

    def _existing(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        obj = self._load(rt, namespace or "", name)
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _require_namespace(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        """The NamespaceLifecycle admission check: the namespace exists and is not terminating."""
        if rt.namespaced and namespace:
            ns_type = resolve("namespaces")
            ns = self._load(ns_type, "", namespace)
            if ns is None:
                raise not_found(ns_type, namespace)
            if (ns.get("metadata") or {}).get("deletionTimestamp"):
                raise ApiError(403, "Forbidden",
                               f'{rt.plural} "{name}" is forbidden: unable to create new content '
                               f'in namespace {namespace} because it is being terminated',
                               {"name": name, "kind": rt.plural})

    def _check_invalid(self, rt: ResourceType, obj: dict, old: dict | None) -> None:
        not_base64 = conversion.invalid_base64(rt, obj)
        if not_base64 is not None:
            raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                              f'{rt.kind}: illegal base64 data in {json.dumps(not_base64[:20])}')
        bad_times = conversion.normalize_times(rt, obj)
        if bad_times:
            field, value = bad_times[0]
            raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                              f'{rt.kind}: parsing time {json.dumps(str(value))} as '
                              f'"2006-01-02T15:04:05Z07:00": cannot parse {field}')
        errs = validate_update(rt, old, obj) if old is not None else validate(rt, obj)
        if errs:
            name = (obj.get("metadata") or {}).get("name") or ""
            raise invalid_object(rt, obj.get("kind") or rt.kind, name, errs)

    # --- create ---------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str | None, obj: dict, dry_run: bool = False,
               keep_status: bool = False) -> dict:
        """POST. Like the real server, types with a status subresource (except
        Nodes) start with an empty status whatever the body says, unless
        `keep_status` (the fixture's direct seeding)."""
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be an object")
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        self._check_kind(rt, obj)
        if rt.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = namespace or meta.get("namespace")
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        with self.storage.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(rt, meta)
            # The real order: admission (namespace exists), validation, then storage.
            self._require_namespace(rt, meta.get("namespace"), meta.get("name") or "")
            self._check_invalid(rt, obj, None)
            if self._load(rt, meta.get("namespace") or "", meta["name"]) is not None:
                raise already_exists(rt, meta["name"])
            self._stamp_new(rt, obj)
            if rt.has_status and rt.kind != "Node" and not keep_status:
                obj.pop("status", None)
            # Validate the defaulted object again only when defaulting changed it:
            # the first check already covered every field it did not touch.
            undefaulted = clone(obj)
            self._default(rt, obj)
            if obj != undefaulted:
                self._check_invalid(rt, obj, None)
            self.admit(rt, "CREATE", obj, None, dry_run)
            if dry_run:
                return obj
            return self._store(rt, "ADDED", obj, None)

    def _check_kind(self, rt: ResourceType, obj: dict) -> None:
        """A body may omit kind/apiVersion (the URL says them) but not contradict them."""
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if api_version and api_version != rt.api_version:
            raise bad_request(f"the API version in the data ({api_version}) does not match the "
                              f"expected API version ({rt.api_version})")
        if kind and kind != rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected "
                              f"kind ({rt.kind})")
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version

    def _generate_name(self, rt: ResourceType, meta: dict) -> str:
        prefix = meta["generateName"][:58]
        for _ in range(100):
            name = prefix + "".join(random.choice(_NAME_ALPHABET) for _ in range(5))
            if self._load(rt, meta.get("namespace") or "", name) is None:
                return name
        raise ApiError(500, "InternalError", "could not generate a unique name")

    def _stamp_new(self, rt: ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        if rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)

    def _default(self, rt: ResourceType, obj: dict) -> None:
        services = self._load_all(resolve("services")) if rt.plural == "services" else []
        defaults.apply_defaults(rt, obj, services)

    # --- get / list / watch ---------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        return self._existing(rt, namespace, name)

    def list(self, rt: ResourceType, opts: ListOptions) -> dict:
        """The list as a plain dict whose items the caller owns (copies)."""
        page = self.list_page(rt, opts)
        return {"kind": rt.list_kind, "apiVersion": rt.api_version,
                "metadata": page.metadata, "items": page.items()}

    def list_page(self, rt: ResourceType, opts: ListOptions) -> "ListPage":
        """One page of a list, sharing the stored objects (read-only) and their JSON."""
        label_match = selectors.parse_label_selector(opts.label_selector)
        field_match = selectors.parse_field_selector(opts.field_selector, rt.kind)
        start_after: tuple[str, str] | None = None
        if opts.continue_token:
            if opts.resource_version not in (None, ""):
                raise bad_request("specifying resource version is not allowed when using continue")
            snapshot_rv, start_after = decode_continue(opts.continue_token)
            snap = self._snapshot_or_expired(rt, snapshot_rv, start_after)
        else:
            snapshot_rv, snap, from_cache = self._read_for_list(rt, opts)
            if from_cache:
                self.list_reads["cache"] += 1
                opts = replace(opts, limit=0)   # the watch cache answers in one piece
            else:
                self.list_reads["etcd"] += 1

        lo, hi = snap.bounds(opts.namespace, start_after)
        selecting = bool(opts.label_selector or opts.field_selector)
        limit = opts.limit or None
        entries: list[tuple[dict, bytes]] = []
        more = False
        position = lo
        for position in range(lo, hi):
            stored = snap.entry(snap.keys[position])
            obj = conversion.from_storage(rt, stored.obj)
            if selecting and not (label_match(obj) and field_match(obj)):
                continue
            if limit is not None and len(entries) == limit:
                more = True
                break
            entries.append((obj, stored.raw if obj is stored.obj else b""))
        metadata: dict = {"resourceVersion": str(snapshot_rv)}
        if more:
            metadata["continue"] = encode_continue(snapshot_rv, key_of(entries[-1][0]))
            if not selecting:
                metadata["remainingItemCount"] = hi - position
        return ListPage(rt, metadata, entries)

    def _snapshot_or_expired(self, rt: ResourceType, rv: int, start_after) -> Snapshot:
        try:
            return self.storage.snapshot(rt, rv)
        except ValueError:
            current = self.storage.resource_version
            raise expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter, or use the continue "
                "token in this response to retrieve the remainder of the results. Continuing "
                "with the provided token results in an inconsistent list - objects that were "
                "created, modified, or deleted between the time the first chunk was returned "
                "and now may show up in the list.",
                encode_continue(current, start_after)) from None

    def _read_for_list(self, rt: ResourceType, opts: ListOptions) -> tuple[int, Snapshot, bool]:
        """(resourceVersion, snapshot, served by the watch cache) for a first page.

        The real API server's rules (its watch cache is always current here):

        - ``resourceVersion`` unset: a consistent (quorum) read from etcd,
          paged by ``limit``;
        - ``"0"`` (no match, or NotOlderThan): any state, from the watch cache,
          which ignores ``limit`` and answers in one piece; with the watch
          cache off (``watch_cache=False``) it is read from etcd and paged;
        - ``"N"`` with no ``limit`` (no match or NotOlderThan): at least as
          new as N, from the watch cache (504 "Too large resource version"
          after a short wait for an N it has not reached);
        - ``"N"`` with a ``limit``: the watch cache has no pages, so etcd:
          with NotOlderThan the newest state, with no match (the legacy
          meaning of paging at a version) or Exact exactly N; Exact with no
          limit too. 410 Expired once N is compacted.
        """
        rv_text = opts.resource_version or ""
        match = opts.resource_version_match or ""
        if match and match not in ("Exact", "NotOlderThan"):
            raise bad_request(f"resourceVersionMatch: Unsupported value: \"{match}\"")
        if match and not rv_text:
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if rv_text == "":
            with self.storage.lock:
                return self.storage.resource_version, self.storage.snapshot(rt), False
        if rv_text == "0":
            if match == "Exact":
                raise bad_request("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"")
            with self.storage.lock:
                return self.storage.resource_version, self.storage.snapshot(rt), self.watch_cache
        rv = self._parse_rv(rv_text)
        exact = match == "Exact" or (not match and opts.limit > 0)
        if rv > self.storage.resource_version:
            if not self.storage.wait_for_rv(rv, TOO_LARGE_RV_WAIT):
                raise too_large_resource_version(rv, self.storage.resource_version)
        if exact:
            try:
                return rv, self.storage.snapshot(rt, rv), False
            except ValueError:
                raise expired("The resourceVersion for the provided list is too old.") from None
        with self.storage.lock:
            return self.storage.resource_version, self.storage.snapshot(rt), self.watch_cache and not opts.limit

    @staticmethod
    def _parse_rv(text: str) -> int:
        try:
            rv = int(text)
        except ValueError:
            rv = -1
        if rv < 0:
            raise bad_request(f'invalid resource version "{text}"')
        return rv

    def watch(self, rt: ResourceType, opts: ListOptions) -> Watcher:
        label_match = selectors.parse_label_selector(opts.label_selector)
        field_match = selectors.parse_field_selector(opts.field_selector, rt.kind)
        rv_text = opts.resource_version or ""
        if opts.send_initial_events:
            # Watch-list: the state as synthetic ADDED events, then a marker bookmark.
            if opts.resource_version_match != "NotOlderThan":
                raise invalid_list_options(
                    "resourceVersionMatch", opts.resource_version_match or "",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
            if rv_text not in ("", "0"):
                self.storage.wait_for_rv(self._parse_rv(rv_text), TOO_LARGE_RV_WAIT)
            since = None
        else:
            since = None if rv_text in ("", "0") else self._parse_rv(rv_text)
            if since is not None and not self.storage.wait_for_rv(since, TOO_LARGE_RV_WAIT):
                raise too_large_resource_version(since, self.storage.resource_version)
        return self.storage.watch(rt, since, opts.namespace,
                                  lambda obj: label_match(obj) and field_match(obj),
                                  lambda obj: conversion.from_storage(rt, obj),
                                  mark_initial_end=opts.send_initial_events)

    # --- update / patch -------------------------------------------------------------------

    def update(self, rt: ResourceType, namespace: str | None, name: str, obj: dict,
               subresource: str = "", dry_run: bool = False, keep_status: bool = True) -> dict:
        """PUT. `subresource="status"` changes only status. A plain PUT on a type
        with a status subresource keeps the stored status; `keep_status=False`
        (the fixture's direct writes) stores the given status as well."""
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be an object")
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        self._check_kind(rt, obj)
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name "
                              f"on the URL ({name})")
        if rt.namespaced and meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace "
                              "sent on the request")
        with self.storage.lock:
            old = self._existing(rt, namespace, name)
            return self._replace(rt, old, obj, subresource, dry_run, keep_status)

    def _replace(self, rt: ResourceType, old: dict, obj: dict, subresource: str,
                 dry_run: bool, keep_status: bool = True) -> dict:
        meta = obj.setdefault("metadata", {})
        old_meta = old["metadata"]
        name = old_meta["name"]
        sent_rv = meta.get("resourceVersion")
        if sent_rv and sent_rv != old_meta.get("resourceVersion"):
            raise stale_update(rt, name)
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        else:
            new = obj
            if rt.has_status and keep_status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
        new_meta = new["metadata"]
        new_meta["name"] = name
        if rt.namespaced:
            new_meta["namespace"] = old_meta.get("namespace")
        for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation"):
            if field in old_meta:
                new_meta[field] = old_meta[field]
            else:
                new_meta.pop(field, None)
        if "managedFields" not in new_meta and "managedFields" in old_meta:
            new_meta["managedFields"] = old_meta["managedFields"]  # omitted means "keep"
        new_meta["resourceVersion"] = old_meta.get("resourceVersion")
        if rt.crd is not None:
            self._default(rt, new)  # CRD schema defaults apply on every write, before generation counts
        if rt.tracks_generation and _content(new) != _content(old):
            new_meta["generation"] = old_meta.get("generation", 1) + 1
        if rt.key() == ("", "secrets"):
            defaults.encode_string_data(new)
        if rt.key() == ("", "services"):
            defaults.keep_service_allocations(old, new)
            self._default(rt, new)
        self._check_invalid(rt, new, old)
        if new == old:
            return old  # a no-op write keeps its resourceVersion and emits no event
        self.admit(rt, "UPDATE", new, old, dry_run, subresource)
        if dry_run:
            return new
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return self._store(rt, "DELETED", new, old)
        return self._store(rt, "MODIFIED", new, old)

    def patch(self, rt: ResourceType, namespace: str | None, name: str, patch_type: str,
              body, subresource: str = "", dry_run: bool = False,
              field_manager: str | None = None) -> tuple[dict, bool]:
        """PATCH; returns (object, created). Apply patches create missing objects."""
        if patch_type == patching.APPLY:
            return self._apply(rt, namespace, name, body, subresource, dry_run, field_manager)
        with self.storage.lock:
            old = self._existing(rt, namespace, name)
            if patch_type == patching.STRATEGIC and isinstance(body, dict):
                patched = strategic.apply(rt, old, body)
            else:
                patched = patching.apply_patch(patch_type, old, body)
            return self._replace_patched(rt, old, patched, name, subresource, dry_run), False

    def _apply(self, rt: ResourceType, namespace: str | None, name: str, body,
               subresource: str, dry_run: bool, field_manager: str | None) -> tuple[dict, bool]:
        errs = apply.check_options(field_manager)
        if errs:
            raise ApiError(422, "Invalid", f'PatchOptions.meta.k8s.io "" is invalid: {errs[0]}',
                           {"group": "meta.k8s.io", "kind": "PatchOptions",
                            "causes": [{"reason": e.type, "message": e.body(), "field": e.field}
                                       for e in errs]})
        if not isinstance(body, dict):
            raise bad_request("apply patch must be a YAML or JSON object")
        self._check_kind(rt, {"kind": body.get("kind"), "apiVersion": body.get("apiVersion")})
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name "
                              f"on the URL ({name})")
        with self.storage.lock:
            old = self._load(rt, namespace or "", name)
            if old is None:
                if subresource:
                    raise not_found(rt, name)
                obj = apply.apply(None, body, field_manager, rt.api_version)
                obj["metadata"]["name"] = name
                return self.create(rt, namespace, obj, dry_run), True
            applied = apply.apply(old, body, field_manager, rt.api_version)
            return self._replace_patched(rt, old, applied, name, subresource, dry_run), False

    def _replace_patched(self, rt: ResourceType, old: dict, patched, name: str,
                         subresource: str, dry_run: bool) -> dict:
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not an object")
        patched.setdefault("metadata", {})
        self._check_kind(rt, patched)
        if patched["metadata"].get("name") != name:
            raise bad_request(f"the name of the object ({patched['metadata'].get('name')}) "
                              f"does not match the name on the URL ({name})")
        if not subresource and rt.has_status:
            # A patch of the main resource cannot change status: keep the stored one.
            patched.pop("status", None)
            if "status" in old:
                patched["status"] = old["status"]
        return self._replace(rt, old, patched, subresource, dry_run, keep_status=False)

    # --- delete ---------------------------------------------------------------------------

    def delete(self, rt: ResourceType, namespace: str | None, name: str,
               options: dict | None = None, dry_run: bool = False) -> dict:
        options = options or {}
        with self.storage.lock:
            old = self._existing(rt, namespace, name)
            _check_preconditions(rt, old, options.get("preconditions") or {})
            self.admit(rt, "DELETE", None, old, dry_run)
            if dry_run:
                return old
            if rt.key() == ("", "namespaces"):
                return self._terminate_namespace(old)
            if old["metadata"].get("finalizers"):
                if old["metadata"].get("deletionTimestamp"):
                    return old
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._store(rt, "MODIFIED", new, old)
            return self._store(rt, "DELETED", old, old)

    def _terminate_namespace(self, old: dict) -> dict:
        """Deleting a namespace only marks it Terminating; its content goes later
        (`finalize_namespace`), as the namespace controller does it."""
        if old["metadata"].get("deletionTimestamp"):
            return old
        new = copy.deepcopy(old)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new["status"] = {"phase": "Terminating"}
        stored = self._store(resolve("namespaces"), "MODIFIED", new, old)
        self.on_namespace_terminating(old["metadata"]["name"])
        return stored

    def finalize_namespace(self, name: str) -> bool:
        """The namespace controller's work: delete everything in a terminating
        namespace, then the namespace. False while finalizers hold content."""
        ns_type = resolve("namespaces")
        with self.storage.lock:
            ns = self._load(ns_type, "", name)
            if ns is None or not ns["metadata"].get("deletionTimestamp"):
                return True
            remaining = 0
            for rt in REGISTRY:
                if not rt.namespaced or rt.stored_as or rt.virtual:
                    continue
                for obj in self._load_all(rt):
                    if key_of(obj)[0] != name:
                        continue
                    if self.delete(rt, name, key_of(obj)[1])["metadata"].get("deletionTimestamp"):
                        remaining += 1
            if remaining:
                return False
            self._store(ns_type, "DELETED", ns, ns)
            return True

    def delete_collection(self, rt: ResourceType, opts: ListOptions, dry_run: bool = False) -> dict:
        with self.storage.lock:
            listed = self.list(rt, ListOptions(namespace=opts.namespace,
                                               label_selector=opts.label_selector,
                                               field_selector=opts.field_selector))
            deleted = [self.delete(rt, key_of(o)[0], key_of(o)[1], dry_run=dry_run)
                       for o in listed["items"]]
        return {"kind": rt.list_kind, "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.storage.resource_version)},
                "items": deleted}
