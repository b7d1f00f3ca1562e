"""Gateway route timeouts as a Deadline (deadline.py), on plain data: the
conversion from the route's durations, validation, and what the router gets."""

import pytest

from platformd.ingress import routes
from platformd.ingress import validate as v
from platformd.ingress.deadline import MAX_MS, Deadline, from_seconds, payload
from platformd.ingress.model import Configuration, GlobalSettings, Location, Server


@pytest.mark.parametrize("request_s, attempt_s, expected", [
    (0.5, None, Deadline(request_ms=500)),
    (None, 0.25, Deadline(attempt_ms=250)),
    (10, 3, Deadline(10000, 3000)),
    (0.0004, None, Deadline(request_ms=1)),  # below a millisecond: one
    (0.0015, None, Deadline(request_ms=2)),  # rounded up
    (1e9, None, Deadline(request_ms=MAX_MS)),
    (None, None, None), (0, 0, None),  # "0s": no limit
])
def test_route_durations_become_milliseconds(request_s, attempt_s, expected):
    assert from_seconds(request_s, attempt_s) == expected


@pytest.mark.parametrize("fields", [
    {}, {"request_ms": 0}, {"attempt_ms": MAX_MS + 1}, {"request_ms": 1.5}, {"request_ms": True},
    {"request_ms": 100, "attempt_ms": 200}, {"request_ms": "100"},
])
def test_bad_deadlines_are_refused(fields):
    with pytest.raises(v.ValidationError):
        Deadline(**fields)


def test_the_policy_carries_it_and_is_never_fast():
    plain = Location("/", backend="b")
    timed = Location("/", backend="b", deadline=Deadline(700, 600))
    config = Configuration(servers=(Server("a.example", locations=(plain,)), Server("b.example", locations=(timed,))))
    policies = routes.payload(config)["policies"]
    [with_deadline] = [p for p in policies.values() if "deadline" in p]
    assert with_deadline["deadline"] == payload(Deadline(700, 600)) == {"request_ms": 700, "attempt_ms": 600}
    assert with_deadline["fast"] is False
    [without] = [p for p in policies.values() if "deadline" not in p]
    assert without["fast"] is True  # other policies keep their form (and ids)
    assert routes._policy(plain, GlobalSettings()) == routes._policy(Location("/", backend="b"), GlobalSettings())
