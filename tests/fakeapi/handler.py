"""HTTP/1.1 front end: route a request, authorize it, call the registry, and
write JSON (or a chunked watch stream) back.

Paths follow the real server:
  /api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]
  /apis/{group}/{version}/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]
  /api/v1/watch/... (the deprecated watch prefix)
plus discovery (/api, /apis, /apis/{group}[/{version}], /version, /healthz).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

import yaml

from . import openapi, patching, protobuf, resources, schema, tables
from .errors import (ApiError, bad_request, method_not_allowed, unauthorized,
                     unsupported_media_type)
from .rbac import Attributes
from .listing import ListOptions
from .registry import ListPage
from .resources import ResourceType
from .watchstream import LAST_CHUNK, WatchStream, event_chunk

# A watch without timeoutSeconds lasts this long (the real server picks 30-60 minutes).
DEFAULT_WATCH_TIMEOUT = 1800.0


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource",
                    {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str
    legacy_watch: bool


def route_resource(group: str, version: str, rest: list[str],
                   crds: frozenset[str] = resources.ALL_CRDS) -> Route:
    legacy_watch = False
    if rest and rest[0] == "watch":
        legacy_watch, rest = True, rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = resources.find(group, version, rest[2], crds)
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest:
        raise _not_found_path()
    rt = resources.find(group, version, rest[0], crds)
    if rt is None or len(rest) > 3:
        raise _not_found_path()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and not (subresource == "status" and rt.has_status) \
            and not (subresource == "finalize" and rt.plural == "namespaces") \
            and not (subresource == "token" and rt.token_subresource):
        raise _not_found_path()
    if name is not None and rt.namespaced and namespace is None:
        raise _not_found_path()
    return Route(rt, namespace, name, subresource, legacy_watch)


def _timeout_seconds(query: dict) -> float:
    text = query.get("timeoutSeconds", [""])[0]
    try:
        value = float(text) if text else 0.0
    except ValueError:
        raise bad_request(f'timeoutSeconds: Invalid value: "{text}"') from None
    return value if value > 0 else DEFAULT_WATCH_TIMEOUT


def _field_validation(query: dict) -> str:
    mode = query.get("fieldValidation", ["Warn"])[0] or "Warn"
    if mode not in ("Strict", "Warn", "Ignore"):
        raise bad_request(f'fieldValidation: Unsupported value: "{mode}": supported values: '
                          f'"Ignore", "Strict", "Warn"')
    return mode


def _flag(query: dict, key: str) -> bool:
    return query.get(key, [""])[0].lower() in ("1", "true")


def _list_options(query: dict, namespace: str | None) -> ListOptions:
    def one(key):
        values = query.get(key)
        return values[0] if values else None
    limit_text = one("limit") or "0"
    try:
        limit = max(0, int(limit_text))
    except ValueError:
        raise bad_request(f"limit: Invalid value: \"{limit_text}\"") from None
    return ListOptions(namespace=namespace, label_selector=one("labelSelector"),
                       field_selector=one("fieldSelector"), resource_version=one("resourceVersion"),
                       resource_version_match=one("resourceVersionMatch"), limit=limit,
                       continue_token=one("continue"),
                       send_initial_events=(one("sendInitialEvents") or "").lower() == "true")


def _deleted_status(rt: ResourceType, obj: dict) -> dict:
    """What DELETE answers for most types once the object is gone."""
    details = {"name": obj["metadata"]["name"]}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["uid"] = obj["metadata"].get("uid", "")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


class Handler(BaseHTTPRequestHandler):
    """One connection; `self.server.api` is the FakeApiServer."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "fakeapi"
    sys_version = ""

    # --- plumbing -------------------------------------------------------------------------

    def log_message(self, format, *args):  # noqa: A002 - quiet: tests read request_log instead
        pass

    def send_response(self, code, message=None):
        api = self.server.api
        path, _, query = self.path.partition("?")
        api.request_log.append((time.monotonic(), self.command, path, query, code))
        super().send_response(code, message)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, code: int, body, headers: dict[str, str] | None = None) -> None:
        """Send `body` as JSON; bytes are sent as they are (already encoded JSON)."""
        payload = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for warning in self._warnings:
            self.send_header("Warning", '299 - ' + json.dumps(warning))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _send_text(self, code: int, text: str) -> None:
        payload = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_error(self, err: ApiError) -> None:
        self._send_json(err.code, err.status(), err.headers)

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    # --- dispatch -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        api = self.server.api
        self._warnings: list[str] = []
        path, _, raw_query = self.path.partition("?")
        query = urllib.parse.parse_qs(raw_query, keep_blank_values=True)
        try:
            body = self._read_body()
            injected = api.faults.take_failure(path)
            if injected is not None:
                raise injected
            user = api.access.authenticate(self.headers.get("Authorization"))
            if user is None:
                raise unauthorized()
            user = api.access.impersonate(user, self.headers.get("Impersonate-User"),
                                          self.headers.get_all("Impersonate-Group") or [], self.path)
            parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
            if parts[:1] == ["api"] and len(parts) > 2 and parts[1] == "v1":
                self._resource_request(user, "", "v1", parts[2:], query, body)
            elif parts[:1] == ["apis"] and len(parts) > 3:
                self._resource_request(user, parts[1], parts[2], parts[3:], query, body)
            else:
                self._non_resource(user, path, parts)
        except ApiError as err:
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the fake: report it like the real server would
            self._send_error(ApiError(500, "InternalError",
                                      f"Internal error occurred: {type(exc).__name__}: {exc}"))
            raise

    def _non_resource(self, user, path: str, parts: list[str]) -> None:
        api = self.server.api
        if self.command not in ("GET", "HEAD"):
            raise method_not_allowed()
        api.access.authorize(Attributes(user, "get", path=path), self.command, path)
        doc = None
        if parts == ["version"]:
            doc = resources.SERVER_VERSION
        elif parts and parts[0] in ("healthz", "livez", "readyz"):
            self._send_text(200, "ok")
            return
        elif parts == ["api"]:
            doc = resources.api_versions(f"127.0.0.1:{api.port}")
        elif parts == ["api", "v1"]:
            doc = resources.api_resource_list("", "v1")
        elif parts == ["apis"]:
            doc = resources.api_group_list(api.crds)
        elif len(parts) == 2 and parts[0] == "apis":
            doc = resources.api_group(parts[1], api.crds)
        elif len(parts) == 3 and parts[0] == "apis":
            doc = resources.api_resource_list(parts[1], parts[2], api.crds)
        elif parts == ["openapi", "v3"]:
            doc = openapi.root_document(api.crds)
        elif parts[:2] == ["openapi", "v3"] and len(parts) >= 4:
            if parts[2] == "api":
                doc = openapi.group_version_document("", parts[3], api.crds)
            elif parts[2] == "apis" and len(parts) == 5:
                doc = openapi.group_version_document(parts[3], parts[4], api.crds)
        elif not parts:
            doc = {"paths": sorted(["/api", "/api/v1", "/apis", "/version", "/healthz"] +
                                   [f"/apis/{g['name']}" for g in resources.api_group_list(api.crds)["groups"]])}
        if doc is None:
            self._send_text(404, "404 page not found\n")
            return
        self._send_json(200, doc)

    def _resource_request(self, user, group: str, version: str, rest: list[str], query: dict,
                          body: bytes) -> None:
        api = self.server.api
        route = route_resource(group, version, rest, api.crds)
        rt, method = route.rt, self.command
        if route.legacy_watch and route.name:
            # /watch/.../{name} is a watch of the collection narrowed to that name.
            query = {**query, "fieldSelector": [f"metadata.name={route.name}"]}
            route = Route(rt, route.namespace, None, "", True)
        watch = route.legacy_watch or _flag(query, "watch")
        if method in ("PUT", "PATCH") and not route.name:
            raise method_not_allowed()
        if method == "POST" and route.name and route.subresource != "token":
            raise method_not_allowed()
        verb = {
            "GET": "get" if route.name else ("watch" if watch else "list"),
            "HEAD": "get",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if route.name else "deletecollection",
        }[method]
        if (rt.virtual or route.subresource == "token") and verb != "create":
            raise method_not_allowed()
        api.access.authorize(Attributes(user, verb, rt.group, rt.plural, route.subresource,
                                        route.namespace or "", route.name or ""), method, self.path)
        dry_run = "All" in query.get("dryRun", [])
        registry = api.registry
        if rt.virtual:
            self._send_json(201, api.access.review(rt, self._decode(body), user))
        elif route.subresource == "token":
            self._send_json(201, api.access.issue_token(route.namespace, route.name,
                                                        self._decode(body)))
        elif verb == "get":
            obj = registry.get(rt, route.namespace, route.name)
            self._send_object(rt, 200, obj, query)
        elif verb == "list":
            page = registry.list_page(rt, _list_options(query, route.namespace))
            self._send_list(rt, page, query)
        elif verb == "watch":
            self._watch(rt, _list_options(query, route.namespace), query)
        elif verb == "create":
            obj = registry.create(rt, route.namespace, self._decode_object(rt, body, query), dry_run)
            self._send_object(rt, 201, obj, query)
        elif verb == "update":
            if route.subresource == "finalize":
                route = Route(rt, route.namespace, route.name, "", False)
            obj = registry.update(rt, route.namespace, route.name,
                                  self._decode_object(rt, body, query), route.subresource, dry_run)
            self._send_object(rt, 200, obj, query)
        elif verb == "patch":
            patch_type = patching.media_type(self.headers.get("Content-Type"))
            patch = self._decode(body, yaml_ok=patch_type == patching.APPLY)
            if patch_type != patching.JSON_PATCH:
                self._warnings += schema.decode(rt, patch, _field_validation(query))
            obj, created = registry.patch(rt, route.namespace, route.name, patch_type, patch,
                                          route.subresource, dry_run,
                                          query.get("fieldManager", [None])[0])
            self._send_object(rt, 201 if created else 200, obj, query)
        elif verb == "delete":
            options = self._decode(body) if body.strip() else {}
            obj = registry.delete(rt, route.namespace, route.name, options, dry_run)
            pending = bool(obj["metadata"].get("deletionTimestamp"))  # finalizers hold it
            if rt.returns_deleted_object or pending:
                self._send_object(rt, 200, obj, query)
            else:
                self._send_json(200, _deleted_status(rt, obj))
        else:
            result = registry.delete_collection(rt, _list_options(query, route.namespace), dry_run)
            self._send_json(200, result)

    def _decode_object(self, rt: ResourceType, body: bytes, query: dict):
        """A whole object from the body, decoded as the real server decodes into
        its Go type: unknown fields dropped (and warned about or refused)."""
        obj = self._decode(body)
        self._warnings += schema.decode(rt, obj, _field_validation(query))
        return obj

    def _decode(self, body: bytes, yaml_ok: bool = False):
        content_type = (self.headers.get("Content-Type") or "").lower()
        if "cbor" in content_type:
            raise unsupported_media_type(content_type)
        try:
            if "protobuf" in content_type:
                return protobuf.decode(body)
            if yaml_ok or "yaml" in content_type:
                return yaml.safe_load(body.decode() or "{}")
            return json.loads(body.decode() or "null")
        except protobuf.UnsupportedKind:
            raise unsupported_media_type(content_type) from None
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the body of the request was in an unknown format: {exc}") from None

    # --- responses ------------------------------------------------------------------------

    def _wants_table(self) -> bool:
        accept = self.headers.get("Accept") or ""
        first = accept.split(",")[0]
        return "as=Table" in first and "g=meta.k8s.io" in first

    def _send_object(self, rt: ResourceType, code: int, obj: dict, query: dict) -> None:
        if self._wants_table() and self.command == "GET":
            include = query.get("includeObject", ["Metadata"])[0]
            self._send_json(code, tables.to_table(rt, [obj], {"resourceVersion":
                                                          obj["metadata"].get("resourceVersion", "")},
                                                  include))
        else:
            self._send_json(code, obj)

    def _send_list(self, rt: ResourceType, page: ListPage, query: dict) -> None:
        if self._wants_table():
            include = query.get("includeObject", ["Metadata"])[0]
            self._send_json(200, tables.to_table(rt, page.objects(), page.metadata, include))
        else:
            self._send_json(200, page.json())

    # --- watch ----------------------------------------------------------------------------

    def _watch(self, rt: ResourceType, opts: ListOptions, query: dict) -> None:
        api = self.server.api
        timeout = _timeout_seconds(query)
        try:
            watcher = api.registry.watch(rt, opts)
            error = None
        except ApiError as err:
            if err.code != 410:
                raise
            watcher, error = None, err    # the real server reports this inside the stream
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

        table, include = self._wants_table(), query.get("includeObject", ["Metadata"])[0]

        def to_table(type_: str, obj: dict) -> dict:
            if type_ in ("ADDED", "MODIFIED", "DELETED"):
                meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                return tables.to_table(rt, [obj], meta, include)
            return obj

        if error is not None:
            self.wfile.write(event_chunk("ERROR", error.status()) + LAST_CHUNK)
            return
        stream = WatchStream(api, watcher, self.wfile.write, self.connection, timeout,
                             _flag(query, "allowWatchBookmarks"), to_table if table else None)
        if stream.run():
            self.close_connection = True
