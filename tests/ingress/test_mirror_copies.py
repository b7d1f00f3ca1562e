"""Several copies of a request (mirror.Mirror.also) on plain data: what the
lane says, what the router gets, and what is refused."""

import pytest

from platformd.ingress import lanes
from platformd.ingress import headers as h
from platformd.ingress import validate as v
from platformd.ingress.mirror import MAX_COPIES, Mirror, lane_directives, location_uri, payload
from platformd.ingress.model import BackendProtocol, Location, ProxySettings


def _three() -> Mirror:
    return Mirror(backend="a", also=(Mirror(backend="b", numerator=1, denominator=3), Mirror(address="10.0.0.9:80")))


def test_one_mirror_directive_per_copy_for_each_kind():
    assert lane_directives(_three()) == (("mirror", "/_platform_mirror"), ("mirror", "/_platform_mirror/2"),
                                         ("mirror", "/_platform_mirror/3"), ("mirror_request_body", "on"))
    assert lane_directives(_three(), "GRPC")[:2] == (("mirror", "/_platform_mirror_grpc"),
                                                     ("mirror", "/_platform_mirror_grpc/2"))
    nobody = Mirror(backend="a", request_body=False, also=(Mirror(backend="b", request_body=False),))
    assert lane_directives(nobody) == (("mirror", "/_platform_mirror_nobody"), ("mirror", "/_platform_mirror_nobody/2"),
                                       ("mirror_request_body", "off"))


def test_a_location_with_copies_gets_a_lane_of_its_own_and_one_copy_keeps_the_old_lane():
    one = Location("/", backend="web", mirror=Mirror(backend="a"))
    three = Location("/", backend="web", mirror=_three())
    assert one.lane_directives == (("mirror", "/_platform_mirror"), ("mirror_request_body", "on"))
    assert len(three.lane_directives) == 4
    grpc = Location("/", backend="web", proxy=ProxySettings(protocol=BackendProtocol.GRPC), mirror=_three())
    assert ("mirror", "/_platform_mirror_grpc/3") in grpc.lane_directives


def test_the_payload_keeps_one_copy_as_before_and_lists_the_others():
    assert "also" not in payload(Mirror(backend="a"))
    assert payload(_three())["also"] == [
        {"address": None, "backend": "b", "numerator": 1, "denominator": 3},
        {"address": "10.0.0.9:80", "backend": None, "numerator": 100, "denominator": 100}]


@pytest.mark.parametrize("also", [
    (Mirror(backend="b", host="other.example"),),
    (Mirror(backend="b", uri=("/x",)),),
    (Mirror(backend="b", scheme="https"),),
    (Mirror(backend="b", request_body=False),),
    (Mirror(backend="b", also=(Mirror(backend="c"),)),),
    tuple(Mirror(backend=f"b{i}") for i in range(MAX_COPIES)),
])
def test_copies_that_cannot_share_one_set_of_variables_are_refused(also):
    with pytest.raises(v.ValidationError):
        Mirror(backend="a", also=also)


@pytest.mark.parametrize("uri, ok", [
    ("/_platform_mirror", True), ("/_platform_mirror/2", True), ("/_platform_mirror_grpc/16", True),
    ("/_platform_mirror_nobody/9", True), ("/_platform_mirror/1", False), ("/_platform_mirror/17", False),
    ("/_platform_mirror/02", False), ("/_platform_mirror/2;", False), ("/_platform_mirror_x", False),
    ("/other", False),
])
def test_only_the_fixed_mirror_locations_are_lane_values(uri, ok):
    assert location_uri(uri) is ok
    if ok:
        assert lanes.directives([("mirror", uri)]) == (("mirror", uri),)
    else:
        with pytest.raises(v.ValidationError):
            lanes.directives([("mirror", uri)])


def test_mirror_repeats_in_a_lane_but_other_directives_do_not():
    assert len(lanes.directives([("mirror", "/_platform_mirror"), ("mirror", "/_platform_mirror/2")])) == 2
    with pytest.raises(v.ValidationError):
        lanes.directives([("mirror_request_body", "on"), ("mirror_request_body", "off")])
    assert h  # the uri parts of a Mirror are headers.Values


def test_a_lane_of_a_gateway_table_of_its_own_is_in_nginx_conf():
    from platformd.ingress.model import BoundHosts, Configuration, Server
    loc = Location("/", backend="web", mirror=_three())
    config = Configuration(bound=(BoundHosts(None, 443, (Server("secure.example", locations=(loc,)),)),))
    assert [spec.directives for spec in lanes.used(config)] == [loc.lane_directives]
    config = Configuration(bound=(BoundHosts("10.0.0.1", 80, (), any_host=(loc,)),))
    assert [spec.directives for spec in lanes.used(config)] == [loc.lane_directives]
