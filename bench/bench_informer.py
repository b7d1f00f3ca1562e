"""Informer benchmark: initial sync, memory per object, watch throughput.

    .venv/bin/python bench/bench_informer.py [--objects 10000] [--events 5000]

Prints figures next to their targets; not a test. Each figure is measured on
both sides of the wire where the fake API server could be the bottleneck:

- "server": the fake API server producing the bytes (raw HTTP, no parsing);
- "client": our code alone (parse, store, index, dispatch to a handler) fed
  with the very bytes the server sent, replayed from memory;
- "end to end": an informer against the fake API server over HTTP.

The targets apply to the client side and to end to end. The fake server is a
test fixture in pure Python, not what production talks to, but it keeps
objects as their serialized JSON so that it can serve at these rates; the
"server" rows show its own share, so a missed end-to-end target says which
side was slow.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
import tracemalloc

import urllib3

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from platformd.common import kubeclient  # noqa: E402
from platformd.common.apisource import ApiSource, decode_watch, parse_list  # noqa: E402
from platformd.common.informer import FuncHandler, Informer  # noqa: E402
from platformd.common.reflector import ListPage, ReflectorOptions  # noqa: E402
from platformd.common.resources import ENDPOINT_SLICES  # noqa: E402
from platformd.common.store import index_endpointslice_by_service  # noqa: E402
from tests.fakeapi import FakeApiServer  # noqa: E402

TARGET_SYNC_S = 2.0
TARGET_EVENTS_PER_S = 5000
TARGET_MEMORY_RATIO = 1.5
PAGE = 500
INDEXERS = {"service": index_endpointslice_by_service}


def endpoint_slice(i: int, generation: int = 0) -> dict:
    service = f"svc-{i // 2}"
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-{i % 2}", "namespace": f"ns-{i % 20}",
                     "labels": {"kubernetes.io/service-name": service,
                                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [f"10.{(i >> 8) & 255}.{i & 255}.{j + 10 + generation % 100}"],
                       "conditions": {"ready": True, "serving": True, "terminating": False},
                       "nodeName": f"node-{(i + j) % 50}",
                       "targetRef": {"kind": "Pod", "namespace": f"ns-{i % 20}", "name": f"{service}-pod-{j}"}}
                      for j in range(5)],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


class ReplaySource:
    """Serves recorded list pages and one recorded watch stream from memory,
    through the same decoding ``ApiSource`` uses."""

    def __init__(self, pages: list[bytes], watch_bytes: bytes = b"") -> None:
        self.pages = pages
        self.watch_bytes = watch_bytes
        self.watched = False

    def list(self, resource, namespace, *, limit, continue_token=""):
        index = int(continue_token or 0)
        page = parse_list(self.pages[index], resource)
        following = str(index + 1) if index + 1 < len(self.pages) else ""
        return ListPage(page.items, page.resource_version, following)

    def watch(self, resource, namespace, *, resource_version, timeout_seconds):
        data, self.watch_bytes = self.watch_bytes, b""
        return _ReplayStream(data)


class _ReplayStream:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.closed = threading.Event()

    def __iter__(self):
        size = 64 * 1024
        chunks = (self.data[i:i + size] for i in range(0, len(self.data), size))
        yield from decode_watch(chunks)
        self.closed.wait()  # like a quiet watch: stay open until closed

    def close(self):
        self.closed.set()


def fetch_pages(server: FakeApiServer, path: str) -> tuple[list[bytes], float]:
    pool = urllib3.PoolManager()
    pages, token = [], ""
    started = time.perf_counter()
    while True:
        query = f"limit={PAGE}" + (f"&continue={token}" if token else "")
        body = pool.request("GET", f"{server.url}{path}?{query}").data
        pages.append(body)
        # Only the continue token is needed: find it without a full parse,
        # so this measures the server alone.
        marker = body.find(b'"continue":"')
        token = body[marker + 12:body.index(b'"', marker + 12)].decode() if marker >= 0 else ""
        if not token:
            return pages, time.perf_counter() - started


def fetch_watch(server: FakeApiServer, path: str, since: str, events: int) -> tuple[bytes, float]:
    pool = urllib3.PoolManager()
    started = time.perf_counter()
    response = pool.request("GET", f"{server.url}{path}?watch=true&resourceVersion={since}&timeoutSeconds=120",
                            preload_content=False)
    parts, lines = [], 0
    while lines < events:
        chunk = response.read1(256 * 1024)
        if not chunk:
            break
        parts.append(chunk)
        lines += chunk.count(b"\n")
    elapsed = time.perf_counter() - started
    response.shutdown()
    response.close()
    data = b"".join(parts)
    # keep whole lines with object events only (drop a trailing bookmark, if any)
    kept = [line for line in data.split(b"\n") if line and b'"BOOKMARK"' not in line[:30]]
    return b"\n".join(kept[:events]) + b"\n", elapsed


def sync_informer(source, objects: int, options: ReflectorOptions | None = None) -> tuple[Informer, float]:
    informer = Informer(source, ENDPOINT_SLICES, indexers=INDEXERS, options=options)
    count = [0]
    informer.add_handler(FuncHandler(add=lambda obj: count.__setitem__(0, count[0] + 1)))
    started = time.perf_counter()
    informer.start()
    if not informer.wait_for_sync(120):
        raise SystemExit("informer did not sync")
    elapsed = time.perf_counter() - started
    assert count[0] == objects == len(informer.store), (count[0], len(informer.store))
    return informer, elapsed


def measure_memory(pages: list[bytes], objects: int) -> tuple[float, float]:
    """Bytes per object: plain ``json.loads`` of the pages vs our synced store."""
    gc.collect()
    tracemalloc.start()
    baseline = [json.loads(page)["items"] for page in pages]
    gc.collect()
    plain = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del baseline
    gc.collect()

    tracemalloc.start()
    informer, _ = sync_informer(ReplaySource(pages), objects)
    informer.stop()
    gc.collect()
    ours = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(informer.store) == objects
    return plain / objects, ours / objects


def measure_watch_client(pages: list[bytes], watch_bytes: bytes, events: int) -> float:
    source = ReplaySource(pages, watch_bytes)
    informer = Informer(source, ENDPOINT_SLICES, indexers=INDEXERS)
    updates = [0]
    done = threading.Event()
    first = []

    def on_update(old, new):
        if not first:
            first.append(time.perf_counter())
        updates[0] += 1
        if updates[0] == events:
            done.set()

    informer.add_handler(FuncHandler(update=on_update))
    informer.start()
    if not done.wait(120):
        raise SystemExit(f"only {updates[0]} of {events} watch events arrived")
    elapsed = time.perf_counter() - first[0]
    informer.stop()
    return events / elapsed


def measure_watch_end_to_end(pages: list[bytes], server: FakeApiServer, client, events: int) -> float:
    """List from the recorded pages (state at the old resourceVersion), then
    watch the real server from there: it replays the updates from history."""

    class Hybrid(ReplaySource):
        def watch(self, *args, **kwargs):
            return ApiSource(client).watch(*args, **kwargs)

    informer = Informer(Hybrid(pages), ENDPOINT_SLICES, indexers=INDEXERS)
    updates = [0]
    done = threading.Event()
    started = []

    def on_update(old, new):
        if not started:
            started.append(time.perf_counter())
        updates[0] += 1
        if updates[0] == events:
            done.set()

    informer.add_handler(FuncHandler(update=on_update))
    informer.start()
    if not done.wait(300):
        raise SystemExit(f"only {updates[0]} of {events} watch events arrived")
    elapsed = time.perf_counter() - started[0]
    informer.stop()
    return events / elapsed


def row(label: str, value: str, target: str = "", verdict: bool | None = None) -> None:
    mark = "" if verdict is None else ("  OK" if verdict else "  MISSED")
    print(f"  {label:<44} {value:>14}   {target}{mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=5_000)
    args = parser.parse_args()
    path = ENDPOINT_SLICES.path()

    server = FakeApiServer(history_limit=args.objects + args.events + 1000).start()
    try:
        started = time.perf_counter()
        for i in range(args.objects):
            server.create(endpoint_slice(i))
        seeded = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as tmp:
            client = kubeclient.load(server.write_kubeconfig(os.path.join(tmp, "kubeconfig")))

        print(f"informer benchmark: {args.objects} EndpointSlices x 5 endpoints, "
              f"{args.events} watch events (seeding the fake server took {seeded:.1f}s)")

        pages, server_list_s = fetch_pages(server, path)
        size = sum(len(p) for p in pages)
        print(f"\ninitial sync ({len(pages)} pages of {PAGE}, {size / 1e6:.1f} MB of JSON)")
        row("server: fake API server serving the pages", f"{server_list_s:.2f} s")
        client_informer, client_sync_s = sync_informer(ReplaySource(pages), args.objects)
        client_informer.stop()
        row("client: parse + store + index + handlers", f"{client_sync_s:.2f} s",
            f"target < {TARGET_SYNC_S:.0f} s", client_sync_s < TARGET_SYNC_S)
        e2e_informer, e2e_sync_s = sync_informer(ApiSource(client), args.objects)
        e2e_informer.stop()
        row("end to end: informer over HTTP", f"{e2e_sync_s:.2f} s",
            f"target < {TARGET_SYNC_S:.0f} s", e2e_sync_s < TARGET_SYNC_S)
        if server_list_s > client_sync_s:
            print(f"  -> the fake server is the bottleneck: serving the pages alone takes "
                  f"{server_list_s:.2f} s, our side {client_sync_s:.2f} s")

        plain, ours = measure_memory(pages, args.objects)
        print("\nmemory per stored object (tracemalloc, after gc)")
        row("json.loads of the same bytes", f"{plain:,.0f} B")
        row("our store (objects + keys + service index)", f"{ours:,.0f} B",
            f"target <= {TARGET_MEMORY_RATIO}x", ours / plain <= TARGET_MEMORY_RATIO)
        row("ratio", f"{ours / plain:.2f}x")

        since = json.loads(pages[0])["metadata"]["resourceVersion"]
        started = time.perf_counter()
        for n in range(args.events):
            i = n % args.objects
            obj = server.get("endpointslices", f"ns-{i % 20}", endpoint_slice(i)["metadata"]["name"])
            meta = {**obj["metadata"], "annotations": {"bench/generation": str(n + 1)}}
            server.update({**obj, "metadata": meta, "endpoints": endpoint_slice(i, generation=n + 1)["endpoints"]})
        writes_s = time.perf_counter() - started
        watch_bytes, server_watch_s = fetch_watch(server, path, since, args.events)
        print(f"\nwatch events ({args.events} MODIFIED events, {len(watch_bytes) / 1e6:.1f} MB)")
        row("server: fake API server writes", f"{args.events / writes_s:,.0f} /s")
        row("server: replaying history as a watch", f"{args.events / server_watch_s:,.0f} /s")
        client_rate = measure_watch_client(pages, watch_bytes, args.events)
        row("client: decode + store + index + handler", f"{client_rate:,.0f} /s",
            f"target >= {TARGET_EVENTS_PER_S:,}/s", client_rate >= TARGET_EVENTS_PER_S)
        e2e_rate = measure_watch_end_to_end(pages, server, client, args.events)
        row("end to end: informer watching over HTTP", f"{e2e_rate:,.0f} /s",
            f"target >= {TARGET_EVENTS_PER_S:,}/s", e2e_rate >= TARGET_EVENTS_PER_S)
        if args.events / server_watch_s < client_rate:
            print("  -> the fake server is the bottleneck for watch throughput")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
