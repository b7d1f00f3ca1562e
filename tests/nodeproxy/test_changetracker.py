from platformd.nodeproxy.changetracker import EndpointSliceChangeTracker, ServiceChangeTracker

from .objects import endpoint_slice, service


def test_add_then_delete_cancels_out():
    t = ServiceChangeTracker()
    svc = service("web", "10.96.0.10")
    assert t.update(None, svc)
    assert not t.update(svc, None)
    assert t.take() == {}


def test_update_touching_nothing_we_read_is_dropped():
    t = ServiceChangeTracker()
    old = service("web", "10.96.0.10")
    new = {**old, "metadata": {**old["metadata"], "annotations": {"x": "y"}}}
    assert not t.update(old, new)
    assert t.pending() == 0


def test_previous_is_kept_from_the_last_sync():
    t = ServiceChangeTracker()
    a = service("web", "10.96.0.10", ports=((80, "TCP"),))
    b = service("web", "10.96.0.10", ports=((81, "TCP"),))
    c = service("web", "10.96.0.10", ports=((82, "TCP"),))
    t.update(a, b)
    t.update(b, c)
    change = t.take()["default/web"]
    assert change.previous[0].port == 80 and change.current[0].port == 82
    # b -> a after a sync that applied b is a real change again
    t.update(c, a)
    assert t.pending() == 1
    # ... and going back to c cancels it
    t.update(a, c)
    assert t.pending() == 0


def test_slice_trigger_times_handed_over_with_changes():
    seen = []
    t = EndpointSliceChangeTracker(on_change=seen.append)
    s = endpoint_slice("web", ["10.1.0.1"], trigger="2026-01-01T00:00:00Z")
    t.update(None, s)
    changes, times = t.take_with_trigger_times()
    assert list(changes) == ["default/web-abc"] and times == ["2026-01-01T00:00:00Z"]
    assert seen == [1, 0]
