"""Reflector unit tests against an in-memory source, plus recovery tests
against the fake API server (410, dropped watches, restarts, outages)."""

import json
import random
import threading
import time

import pytest

from platformd.common import errors, kubeclient
from platformd.common.apisource import ApiSource, decode_watch, parse_list
from platformd.common.clock import FakeClock
from platformd.common.reflector import Reflector, ReflectorOptions
from platformd.common.resources import CONFIGMAPS
from platformd.common.store import Store

from tests.common.memsource import MemorySource
from tests.fakeapi import FakeApiServer
from tests.helpers.waiting import wait_for

# Fast numbers for tests that run on the real clock.
FAST = ReflectorOptions(backoff_initial=0.01, backoff_cap=0.05, short_watch=0.0)


def configmap(name, value="v", namespace="default"):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": {"k": value}}


class Running:
    """A reflector running in a thread, stopped on exit."""

    def __init__(self, source, store=None, **kwargs):
        self.store = store if store is not None else Store()
        self.reflector = Reflector(source, CONFIGMAPS, self.store, rng=random.Random(7), **kwargs)
        self.thread = threading.Thread(target=self.reflector.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.reflector.stop()
        self.thread.join(5)
        assert not self.thread.is_alive(), "reflector did not stop"


def store_rvs(store):
    return {key: obj["metadata"]["resourceVersion"] for key, obj in store.items()}


def source_rvs(source):
    return {key: obj["metadata"]["resourceVersion"] for key, obj in source.state(CONFIGMAPS).items()}


# ---------------------------------------------------------------- in-memory source


def test_lists_in_pages_then_follows_the_watch():
    source = MemorySource()
    for i in range(1234):
        source.create(CONFIGMAPS, configmap(f"cm{i:04}"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        lists = [args for name, args in source.calls if name == "list"]
        assert [a["limit"] for a in lists] == [500, 500, 500]
        assert lists[0]["continue"] == "" and lists[1]["continue"] and lists[2]["continue"]
        # "0" first (a server without a watch cache pages it); never with a continue token.
        assert [a["resourceVersion"] for a in lists] == ["0", "", ""]
        assert len(r.store) == 1234
        source.update(CONFIGMAPS, configmap("cm0001", "changed"))
        source.delete(CONFIGMAPS, "default/cm0002")
        source.create(CONFIGMAPS, configmap("new"))
        assert wait_for(lambda: store_rvs(r.store) == source_rvs(source))
        assert r.store.get("default/cm0001")["data"] == {"k": "changed"}
        watch = [args for name, args in source.calls if name == "watch"][0]
        assert watch["resourceVersion"] == "1234"
        assert 300 <= watch["timeoutSeconds"] <= 600
        assert r.reflector.list_count == 1


def test_410_in_the_middle_of_paging_restarts_the_list():
    source = MemorySource()
    for i in range(1200):
        source.create(CONFIGMAPS, configmap(f"cm{i:04}"))
    compacted = []

    def compact_once(page):
        # While the reflector pages, objects change and history is compacted,
        # so its continue token becomes invalid.
        if page == 1 and not compacted:
            compacted.append(True)
            source.delete(CONFIGMAPS, "default/cm0000")
            source.create(CONFIGMAPS, configmap("late"))
            source.compact()

    source.on_list_page = compact_once
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        lists = [args for name, args in source.calls if name == "list"]
        # first page, the failing second page, then one list in one piece at
        # the same version (client-go's pager: FullListIfExpired)
        assert [(a["continue"] != "", a["limit"], a["resourceVersion"]) for a in lists] == [
            (False, 500, "0"), (True, 500, ""), (False, 0, "0")]
        assert store_rvs(r.store) == source_rvs(source)
        assert r.store.get("default/late") is not None
        assert r.store.get("default/cm0000") is None


def test_relists_after_watch_expired_and_sees_deletes_made_meanwhile():
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    source.create(CONFIGMAPS, configmap("b"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        assert wait_for(lambda: source.count("watch") == 1)
        # The watch is lost; while we are away, b is deleted and history compacted.
        source.fail_next(errors.ServerError(503, "unavailable"))
        source.drop_watches()
        source.delete(CONFIGMAPS, "default/b")
        source.create(CONFIGMAPS, configmap("c"))
        source.compact()
        assert wait_for(lambda: store_rvs(r.store) == source_rvs(source))
        assert r.reflector.list_count == 2


def test_relists_from_the_last_version_seen_without_paging():
    """A relist asks for the newest version already seen, with no limit: the
    API server's watch cache answers it, and it never goes back in time."""
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        source.create(CONFIGMAPS, configmap("b"))             # seen by the watch
        wait_for(lambda: r.store.get("default/b") is not None)
        seen = r.reflector.resource_version
        source.fail_next(errors.ResourceExpired(410, "too old resource version", "Expired"))
        source.drop_watches()                                   # the re-watch gets the 410: relist
        wait_for(lambda: r.reflector.list_count == 2)
        relist = [args for name, args in source.calls if name == "list"][-1]
        assert relist == {"limit": 0, "continue": "", "resourceVersion": seen}


@pytest.mark.parametrize("failure", [
    errors.ResourceExpired(410, "too old resource version", "Expired"),
    errors.ResourceVersionTooLarge(504, "Too large resource version", "Timeout"),
])
def test_a_relist_whose_version_is_unavailable_reads_from_etcd_at_once(failure):
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        source.create(CONFIGMAPS, configmap("b"))
        wait_for(lambda: r.store.get("default/b") is not None)
        seen = r.reflector.resource_version
        # The re-watch gets a 410 (relist); that list's version is unavailable too.
        source.fail_next(errors.ResourceExpired(410, "too old resource version", "Expired"), failure)
        source.drop_watches()
        wait_for(lambda: r.reflector.list_count == 2)
        lists = [args["resourceVersion"] for name, args in source.calls if name == "list"]
        assert lists[-2:] == [seen, ""]                        # "" = a consistent read, no wait
        assert store_rvs(r.store) == source_rvs(source)


def test_sink_error_is_survived_by_relisting():
    source = MemorySource()
    source.create(CONFIGMAPS, configmap("a"))

    class FlakyStore(Store):
        failed = False

        def add(self, obj):
            if obj["metadata"]["name"] == "boom" and not FlakyStore.failed:
                FlakyStore.failed = True
                raise RuntimeError("sink bug")
            return super().add(obj)

    with Running(source, store=FlakyStore(), options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        source.create(CONFIGMAPS, configmap("boom"))
        assert wait_for(lambda: store_rvs(r.store) == source_rvs(source))
        assert r.reflector.list_count == 2


def test_stop_interrupts_an_open_watch():
    source = MemorySource()
    r = Running(source, options=FAST)
    with r:
        assert r.reflector.wait_for_sync(5)
        assert wait_for(lambda: r.reflector.watching)
        started = time.monotonic()
    assert time.monotonic() - started < 1.0


def test_health_signal_moves_with_success():
    clock = FakeClock()
    source = MemorySource()
    with Running(source, clock=clock) as r:
        assert r.reflector.wait_for_sync(5)
        first = r.reflector.last_success
        assert first == clock.monotonic()
        clock.advance(30)
        source.create(CONFIGMAPS, configmap("a"))
        assert wait_for(lambda: r.reflector.last_success == first + 30)


# ---------------------------------------------------------------- backoff (fake clock)


def settle(clock, reflector, timeout=5.0):
    """Wait (real time) until the reflector has done everything it can do at
    the current fake time: it is blocked on the fake clock with a deadline
    still in the future, or it is in an open watch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reflector.watching:
            return
        with clock._cond:
            if any(d > clock._now for d in clock._waiters):
                return
        time.sleep(0.0005)
    raise AssertionError("reflector is not waiting on the clock")


def drive(clock, source, reflector, until, step=0.05):
    """Advance the fake clock by ``until`` seconds in small steps, letting the
    reflector settle after each; returns the fake times of source calls."""
    start = clock.monotonic()
    attempts_at = []
    seen = 0
    while True:
        settle(clock, reflector)
        calls = len(source.calls)
        attempts_at.extend([clock.monotonic() - start] * (calls - seen))
        seen = calls
        if clock.monotonic() - start >= until - 1e-9:
            return attempts_at
        clock.advance(step)


def max_attempts(options, window):
    """Upper bound on attempts in ``window`` seconds of continuous failure:
    one at once, then one after each delay, where delay k is at least
    (1 - jitter) * min(cap, initial * 2**k) with the Backoff's jitter of 0.5."""
    attempts, elapsed, k = 1, 0.0, 0
    while True:
        elapsed += 0.5 * min(options.backoff_cap, options.backoff_initial * 2 ** k)
        if elapsed > window:
            return attempts
        attempts += 1
        k += 1


def test_failures_are_backed_off_exponentially_with_jitter():
    clock = FakeClock()
    source = MemorySource()
    source.fail_next(*[errors.ApiUnreachable("connection refused")] * 6)
    with Running(source, clock=clock) as r:
        attempts = drive(clock, source, r.reflector, until=40)
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    # 0.8 s doubling, jitter takes off at most half; the 7th call succeeds.
    for k, gap in enumerate(gaps[:6]):
        raw = min(30.0, 0.8 * 2 ** k)
        assert raw * 0.5 - 0.06 <= gap <= raw + 0.06, (k, gaps)


def test_requests_stay_bounded_while_the_source_is_down():
    clock = FakeClock()
    source = MemorySource()
    source.fail_next(*[errors.ApiUnreachable("connection refused")] * 1000)
    options = ReflectorOptions()
    with Running(source, clock=clock) as r:
        attempts = drive(clock, source, r.reflector, until=10)
    bound = max_attempts(options, 10)  # 5 with the default numbers: t=0, >=0.4, 1.2, 2.8, 6.0
    assert bound == 5
    assert 3 <= len(attempts) <= bound


def test_retry_after_is_a_lower_bound_for_the_delay():
    clock = FakeClock()
    source = MemorySource()
    source.fail_next(errors.TooManyRequests(429, "slow down", "TooManyRequests", retry_after=7))
    with Running(source, clock=clock) as r:
        attempts = drive(clock, source, r.reflector, until=10)
        assert r.reflector.has_synced()
    assert len(attempts) >= 2
    assert attempts[1] - attempts[0] >= 7 - 1e-6


def test_backoff_resets_only_after_a_healthy_period():
    clock = FakeClock()
    source = MemorySource()
    rng_check = ReflectorOptions()
    source.fail_next(*[errors.ServerError(500, "boom")] * 5)
    with Running(source, clock=clock) as r:
        drive(clock, source, r.reflector, until=40)
        assert r.reflector.has_synced()
        # Grown: the next failure would wait at least 0.5 * 0.8 * 2**5.
        assert r.reflector._backoff.attempts == 5
        # Healthy for longer than the reset period, then a failure: back to the start.
        clock.advance(rng_check.backoff_reset_after + 1)
        source.fail_next(errors.ServerError(500, "boom"))
        source.drop_watches()
        assert wait_for(lambda: r.reflector._backoff.attempts == 1)


def test_watches_that_end_at_once_are_backed_off():
    clock = FakeClock()
    source = MemorySource()
    source.end_watches_at_once = True
    with Running(source, clock=clock) as r:
        assert r.reflector.wait_for_sync(5)
        drive(clock, source, r.reflector, until=10)
    watches = source.count("watch")
    assert 3 <= watches <= max_attempts(ReflectorOptions(), 10)


def test_repeated_410_is_backed_off():
    clock = FakeClock()
    source = MemorySource()
    source.fail_next(*[errors.ResourceExpired(410, "gone", "Expired")] * 100)
    with Running(source, clock=clock) as r:
        drive(clock, source, r.reflector, until=10)
    # The first 410 is relisted at once, later ones back off like failures.
    # (Each attempt is two lists: at its version, then at once from etcd.)
    lists = [args["resourceVersion"] for name, args in source.calls if name == "list"]
    attempts = [rv for rv in lists if rv != ""]
    assert len(lists) == 2 * len(attempts)
    assert len(attempts) <= max_attempts(ReflectorOptions(), 10) + 1


# ---------------------------------------------------------------- against the fake API server


@pytest.fixture
def fake_api(tmp_path):
    server = FakeApiServer().start()
    client = kubeclient.load(server.write_kubeconfig(tmp_path / "kubeconfig"))
    yield server, ApiSource(client)
    server.stop()


def server_rvs(server):
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
            for o in server.list_objects("configmaps")}


def lists_made(server):
    return sum(1 for _, method, path, query, _ in server.request_log
               if path == "/api/v1/configmaps" and "watch=true" not in query)


def watches_made(server):
    return sum(1 for _, method, path, query, _ in server.request_log
               if path == "/api/v1/configmaps" and "watch=true" in query)


def test_fake_api_relists_on_410(fake_api):
    server, source = fake_api
    for i in range(5):
        server.create(configmap(f"cm{i}"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        assert wait_for(lambda: r.reflector.watching)
        # Make the reflector lose its watch and miss changes, then forget history.
        server.faults.fail_next(3, 503, path_prefix="/api/v1/configmaps")
        server.faults.drop_watches()
        server.delete("configmaps", "default", "cm0")
        server.update({**server.get("configmaps", "default", "cm1"), "data": {"k": "new"}})
        server.create(configmap("late"))
        server.faults.compact()
        assert wait_for(lambda: store_rvs(r.store) == server_rvs(server))
        # The missed delete can only be learnt from a new list.
        assert r.reflector.list_count == 2
        assert lists_made(server) == 2


def list_queries(server):
    return [query for _, _, path, query, status in server.request_log
            if path == "/api/v1/configmaps" and "watch=true" not in query]


def test_fake_api_lists_come_from_the_watch_cache_not_etcd(fake_api):
    """The first list asks for "0" and gets everything in one answer; a relist
    asks for the last version seen, without a limit: neither reads etcd."""
    server, source = fake_api
    for i in range(1200):
        server.create(configmap(f"cm{i:04}"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        assert len(r.store) == 1200
        assert list_queries(server) == ["limit=500&resourceVersion=0"]
        wait_for(lambda: r.reflector.watching)
        server.create(configmap("late"))
        wait_for(lambda: r.store.get("default/late") is not None)
        seen = r.reflector.resource_version
        server.faults.fail_next(1, 410, path_prefix="/api/v1/configmaps")   # the re-watch: relist
        server.faults.drop_watches()
        wait_for(lambda: r.reflector.list_count == 2)
        assert list_queries(server)[1] == f"resourceVersion={seen}"
        assert server.registry.list_reads == {"cache": 2, "etcd": 0}
        assert store_rvs(r.store) == server_rvs(server)


def test_fake_api_without_a_watch_cache_pages_and_keeps_paging(fake_api):
    server, source = fake_api
    server.registry.watch_cache = False
    for i in range(1200):
        server.create(configmap(f"cm{i:04}"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        queries = list_queries(server)
        assert queries[0] == "limit=500&resourceVersion=0" and len(queries) == 3
        wait_for(lambda: r.reflector.watching)
        seen = r.reflector.resource_version
        server.faults.fail_next(1, 410, path_prefix="/api/v1/configmaps")   # the re-watch: relist
        server.faults.drop_watches()
        wait_for(lambda: r.reflector.list_count == 2)
        # The server pages, so the relist pages too (an exact read at the version seen).
        assert list_queries(server)[3] == f"limit=500&resourceVersion={seen}"
        assert store_rvs(r.store) == server_rvs(server)


def test_fake_api_restarts_a_list_whose_continue_token_expired(fake_api):
    server, source = fake_api
    for i in range(7):
        server.create(configmap(f"cm{i}"))

    class CompactAfterFirstPage:
        def __init__(self):
            self.pages = 0

        def list(self, *args, **kwargs):
            page = source.list(*args, **kwargs)
            self.pages += 1
            if self.pages == 1:
                server.delete("configmaps", "default", "cm6")
                server.create(configmap("late"))
                server.faults.compact()
            return page

        def watch(self, *args, **kwargs):
            return source.watch(*args, **kwargs)

    server.registry.watch_cache = False            # so that "0" is paged
    options = ReflectorOptions(page_size=3, backoff_initial=0.01, backoff_cap=0.05, short_watch=0.0)
    with Running(CompactAfterFirstPage(), options=options) as r:
        assert r.reflector.wait_for_sync(5)
        assert store_rvs(r.store) == server_rvs(server)
    statuses = [(query, status) for _, _, path, query, status in server.request_log
                if path == "/api/v1/configmaps" and "watch=true" not in query]
    assert statuses[0] == ("limit=3&resourceVersion=0", 200)
    assert statuses[1][0].startswith("limit=3&continue=") and statuses[1][1] == 410
    assert statuses[2] == ("resourceVersion=0", 200)  # started over, in one piece


def test_fake_api_rewatches_after_dropped_watches_without_relisting(fake_api):
    server, source = fake_api
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        assert wait_for(lambda: watches_made(server) == 1)
        for round_ in range(4):
            before = watches_made(server)
            server.faults.drop_watches(abrupt=bool(round_ % 2))
            for i in range(5):
                server.create(configmap(f"cm{round_}-{i}"))
            assert wait_for(lambda: watches_made(server) > before)
        assert wait_for(lambda: store_rvs(r.store) == server_rvs(server))
        assert r.reflector.list_count == 1
        assert lists_made(server) == 1
        assert watches_made(server) == 5


def test_fake_api_recovers_from_a_full_restart(fake_api):
    server, source = fake_api
    for i in range(3):
        server.create(configmap(f"cm{i}"))
    with Running(source, options=FAST) as r:
        assert r.reflector.wait_for_sync(5)
        server.stop()
        server.delete("configmaps", "default", "cm0")
        server.create(configmap("while-down"))
        time.sleep(0.3)  # the reflector fails to reconnect a few times
        server.start()
        assert wait_for(lambda: store_rvs(r.store) == server_rvs(server))
        assert r.store.get("default/cm0") is None
        assert wait_for(lambda: r.reflector.watching)


def test_fake_api_requests_stay_bounded_while_the_server_fails(fake_api):
    """An API server answering 503 to everything for 10 s: the reflector makes
    at most ``max_attempts(ReflectorOptions(), 10)`` (= 5) requests, as the
    request log shows."""
    server, source = fake_api
    clock = FakeClock()
    server.faults.fail_next(10**6, 503)
    with Running(source, clock=clock) as r:
        drive(clock, FailedCalls(server), r.reflector, until=10)
    made = len([1 for *_, status in server.request_log if status == 503])
    assert 3 <= made <= max_attempts(ReflectorOptions(), 10) == 5


def test_fake_api_requests_stay_bounded_while_the_server_is_down(fake_api):
    """Nothing listening for 10 s (connection refused): same bound, counted at
    the source since a server that is down logs nothing."""
    server, source = fake_api
    server.stop()
    clock = FakeClock()
    counting = CountingSource(source)
    with Running(counting, clock=clock) as r:
        drive(clock, counting, r.reflector, until=10)
        assert not r.reflector.has_synced()
    assert 3 <= len(counting.calls) <= max_attempts(ReflectorOptions(), 10)


class FailedCalls:
    """Adapts the fake server's request log to ``drive``'s ``.calls``."""

    def __init__(self, server):
        self.server = server

    @property
    def calls(self):
        return [entry for entry in self.server.request_log if entry[4] >= 500]


class CountingSource:
    def __init__(self, source):
        self.source = source
        self.calls = []

    def list(self, *args, **kwargs):
        self.calls.append("list")
        return self.source.list(*args, **kwargs)

    def watch(self, *args, **kwargs):
        self.calls.append("watch")
        return self.source.watch(*args, **kwargs)


# ---------------------------------------------------------------- watch stream decoding


def test_decode_watch_handles_lines_split_and_joined_across_chunks():
    lines = [json.dumps({"type": t, "object": {"metadata": {"name": f"o{i}", "resourceVersion": str(i)}}})
             for i, t in enumerate(["ADDED", "MODIFIED", "BOOKMARK", "DELETED"])]
    data = ("\n".join(lines) + "\n").encode()
    for size in (1, 7, 64, len(data)):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        events = list(decode_watch(chunks))
        assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
            ("ADDED", "o0"), ("MODIFIED", "o1"), ("BOOKMARK", "o2"), ("DELETED", "o3")]


def test_decode_watch_raises_error_events_as_our_exceptions():
    gone = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}\n'
    with pytest.raises(errors.ResourceExpired, match="too old"):
        list(decode_watch([b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n', gone]))
    with pytest.raises(errors.ServerError):
        list(decode_watch([b'{"type":"ERROR","object":{"kind":"Status","code":500}}\n']))
    with pytest.raises(errors.InvalidResponse):
        list(decode_watch([b"<html>\n"]))


def test_parse_list_fills_in_kind_and_api_version():
    body = json.dumps({"kind": "ConfigMapList", "metadata": {"resourceVersion": "42", "continue": "abc"},
                       "items": [{"metadata": {"name": "a"}}]}).encode()
    page = parse_list(body, CONFIGMAPS)
    assert page.resource_version == "42" and page.continue_token == "abc"
    assert page.items == [{"metadata": {"name": "a"}, "kind": "ConfigMap", "apiVersion": "v1"}]
    with pytest.raises(errors.InvalidResponse):
        parse_list(b"not json", CONFIGMAPS)
