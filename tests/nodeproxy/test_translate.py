from platformd.nodeproxy import ipsets
from platformd.nodeproxy.kernel import IPSetEntry, RealServer, VirtualServer
from platformd.nodeproxy.translate import (
    Options, parse_service, parse_slice, select_endpoints, endpoints_for, service_state)

from .objects import endpoint, endpoint_slice, service

OPTS = Options(hostname="node-a", node_ips=("192.168.1.10",), scheduler="rr")


def state(svc, *slices, opts=OPTS):
    return service_state(parse_service(svc), [parse_slice(s) for s in slices], opts)


def test_cluster_ip_service_gets_virtual_server_with_ready_endpoints():
    st = state(service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1", "10.1.0.2"]))
    vs, reals = st.virtual[("TCP", "10.96.0.10", 80)]
    assert vs == VirtualServer("TCP", "10.96.0.10", 80, "rr", 0)
    assert reals == {RealServer("10.1.0.1", 8080), RealServer("10.1.0.2", 8080)}
    assert st.addresses == {"10.96.0.10"}
    assert (ipsets.CLUSTER_IP, IPSetEntry("10.96.0.10", "tcp", 80)) in st.entries


def test_ignored_services():
    assert parse_service(service("h", "None")) == ()
    assert parse_service({**service("x", "10.0.0.1"), "spec": {"type": "ExternalName", "externalName": "a.b"}}) == ()
    other = service("o", "10.96.0.3")
    other["metadata"]["labels"] = {"service.kubernetes.io/service-proxy-name": "other"}
    assert parse_service(other) == ()
    assert parse_service(None) == ()


def test_not_ready_endpoints_excluded_and_terminating_fallback():
    eps = [endpoint("10.1.0.1", ready=False),
           endpoint("10.1.0.2", ready=False, serving=True, terminating=True)]
    st = state(service("web", "10.96.0.10"), endpoint_slice("web", eps))
    assert st.virtual[("TCP", "10.96.0.10", 80)][1] == {RealServer("10.1.0.2", 8080)}
    eps.append(endpoint("10.1.0.3"))
    st = state(service("web", "10.96.0.10"), endpoint_slice("web", eps))
    assert st.virtual[("TCP", "10.96.0.10", 80)][1] == {RealServer("10.1.0.3", 8080)}


def test_session_affinity_sets_persistence():
    svc = service("web", "10.96.0.10", sessionAffinity="ClientIP",
                  sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    assert state(svc).virtual[("TCP", "10.96.0.10", 80)][0].persistence_timeout == 60
    svc = service("web", "10.96.0.10", sessionAffinity="ClientIP")
    assert state(svc).virtual[("TCP", "10.96.0.10", 80)][0].persistence_timeout == 10800


def test_node_port_load_balancer_external_ip_and_local_policy():
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="LoadBalancer",
                  externalIPs=["203.0.113.5"], externalTrafficPolicy="Local",
                  status={"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}})
    sl = endpoint_slice("web", [endpoint("10.1.0.1", node="node-a"), endpoint("10.1.0.2", node="node-b")])
    st = state(svc, sl)
    local_only = {RealServer("10.1.0.1", 8080)}
    both = {RealServer("10.1.0.1", 8080), RealServer("10.1.0.2", 8080)}
    assert st.virtual[("TCP", "10.96.0.10", 80)][1] == both  # internal policy Cluster
    assert st.virtual[("TCP", "203.0.113.5", 80)][1] == local_only
    assert st.virtual[("TCP", "198.51.100.7", 80)][1] == local_only
    assert st.virtual[("TCP", "192.168.1.10", 30080)][1] == local_only
    assert st.addresses == {"10.96.0.10", "203.0.113.5", "198.51.100.7"}
    assert {(ipsets.EXTERNAL_IP_LOCAL, IPSetEntry("203.0.113.5", "tcp", 80)),
            (ipsets.LOAD_BALANCER, IPSetEntry("198.51.100.7", "tcp", 80)),
            (ipsets.LOAD_BALANCER_LOCAL, IPSetEntry("198.51.100.7", "tcp", 80)),
            (ipsets.NODE_PORT_TCP, IPSetEntry(port=30080)),
            (ipsets.NODE_PORT_LOCAL_TCP, IPSetEntry(port=30080)),
            (ipsets.LOOP_BACK, IPSetEntry("10.1.0.1", "tcp", 8080, "10.1.0.1"))} <= st.entries
    assert not any(name == ipsets.EXTERNAL_IP for name, _ in st.entries)


def test_internal_traffic_policy_local():
    svc = service("web", "10.96.0.10", internalTrafficPolicy="Local")
    sl = endpoint_slice("web", [endpoint("10.1.0.1", node="node-b")])
    assert state(svc, sl).virtual[("TCP", "10.96.0.10", 80)][1] == frozenset()


def test_udp_and_sctp_node_ports():
    svc = service("dns", "10.96.0.53", ports=((53, "UDP", 30053), (99, "SCTP", 30099)), type="NodePort")
    sl = endpoint_slice("dns", ["10.1.0.9"], ports=((5353, "UDP"), (9999, "SCTP")), port_names=["p53", "p99"])
    st = state(svc, sl)
    assert st.virtual[("UDP", "10.96.0.53", 53)][1] == {RealServer("10.1.0.9", 5353)}
    assert st.virtual[("SCTP", "192.168.1.10", 30099)][1] == {RealServer("10.1.0.9", 9999)}
    assert (ipsets.NODE_PORT_UDP, IPSetEntry(port=30053)) in st.entries
    assert (ipsets.NODE_PORT_SCTP, IPSetEntry("192.168.1.10", "sctp", 30099)) in st.entries


def test_load_balancer_proxy_ip_mode_not_bound():
    svc = service("web", "10.96.0.10", type="LoadBalancer",
                  status={"loadBalancer": {"ingress": [{"ip": "198.51.100.7", "ipMode": "Proxy"}]}})
    assert state(svc).addresses == {"10.96.0.10"}


def test_endpoints_deduplicated_across_slices_and_port_name_matched():
    a = endpoint_slice("web", ["10.1.0.1"], name="a")
    b = endpoint_slice("web", ["10.1.0.1", "10.1.0.2"], name="b")
    sp = parse_service(service("web", "10.96.0.10"))[0]
    eps = endpoints_for(sp, [parse_slice(a), parse_slice(b)], "node-a")
    assert [e.address for e in eps] == ["10.1.0.1", "10.1.0.2"]
    other = endpoint_slice("web", ["10.1.0.3"], port_names=["metrics"])
    assert endpoints_for(sp, [parse_slice(other)], "node-a") == []


def test_select_endpoints_local_fallback_to_terminating():
    sp = parse_service(service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort",
                               externalTrafficPolicy="Local"))[0]
    sl = parse_slice(endpoint_slice("web", [endpoint("10.1.0.1", node="node-b"),
                                            endpoint("10.1.0.2", ready=False, serving=True,
                                                     terminating=True, node="node-a")]))
    cluster, external = select_endpoints(sp, endpoints_for(sp, [sl], "node-a"))
    assert [e.address for e in cluster] == ["10.1.0.1"]
    assert [e.address for e in external] == ["10.1.0.2"]


def test_ipv6_slices_parsed_with_their_family_and_unlabelled_or_fqdn_ignored():
    s = endpoint_slice("web", ["fd00::1", "10.1.0.1"])
    s["addressType"] = "IPv6"
    parsed = parse_slice(s)
    assert parsed.family == 6 and [e.address for e in parsed.endpoints] == ["fd00::1"]
    s["addressType"] = "FQDN"
    assert parse_slice(s) is None
    s = endpoint_slice("web", ["10.1.0.1"])
    s["metadata"]["labels"] = {}
    assert parse_slice(s) is None


def test_ipvs_mode_serves_the_ipv4_half_of_a_dual_stack_service_and_skips_ipv6_only_ones():
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort")
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    six = endpoint_slice("web", ["fd00:244::1"], name="web-6")
    six["addressType"] = "IPv6"
    opts = Options(hostname="node-a", node_ips=("192.168.1.10",), scheduler="rr")
    st = service_state(parse_service(svc), [parse_slice(endpoint_slice("web", ["10.1.0.1"])), parse_slice(six)], opts)
    assert set(st.virtual) == {("TCP", "10.96.0.10", 80), ("TCP", "192.168.1.10", 30080)}
    assert st.virtual[("TCP", "10.96.0.10", 80)][1] == {RealServer("10.1.0.1", 8080)}
    only6 = service("v6", "fd00:96::20")
    assert parse_service(only6)[0].cluster_ips == ("fd00:96::20",)
    assert service_state(parse_service(only6), [parse_slice(six)], opts).virtual == {}


def test_ipv6_addresses_are_kept_in_canonical_form():
    svc = service("web", "fd00:96:0:0::10")
    svc["spec"]["externalIPs"] = ["2001:DB8::1"]
    sp = parse_service(svc)[0]
    assert sp.cluster_ips == ("fd00:96::10",) and sp.external_ips == ("2001:db8::1",)


DUAL = Options(hostname="node-a", node_ips=("192.168.1.10", "fd00:1::10"), scheduler="rr", families=(4, 6))


def _six(name, addresses, **kw):
    s = endpoint_slice(name, addresses, name=f"{name}-6", **kw)
    s["addressType"] = "IPv6"
    return s


def test_dual_stack_ipvs_serves_each_family_with_its_own_endpoints_and_sets():
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort")
    svc["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::10"]
    st = state(svc, endpoint_slice("web", ["10.1.0.1"]), _six("web", ["fd00:244::1"]), opts=DUAL)
    assert set(st.virtual) == {("TCP", "10.96.0.10", 80), ("TCP", "192.168.1.10", 30080),
                               ("TCP", "fd00:96::10", 80), ("TCP", "fd00:1::10", 30080)}
    assert st.virtual[("TCP", "10.96.0.10", 80)][1] == {RealServer("10.1.0.1", 8080)}
    assert st.virtual[("TCP", "fd00:96::10", 80)][1] == {RealServer("fd00:244::1", 8080)}
    assert st.virtual[("TCP", "fd00:1::10", 30080)][1] == {RealServer("fd00:244::1", 8080)}
    assert st.addresses == {"10.96.0.10", "fd00:96::10"}
    assert (ipsets.CLUSTER_IP, IPSetEntry("10.96.0.10", "tcp", 80)) in st.entries
    assert ("KUBE-6-CLUSTER-IP", IPSetEntry("fd00:96::10", "tcp", 80)) in st.entries
    assert ("KUBE-6-NODE-PORT-TCP", IPSetEntry(port=30080)) in st.entries
    # no IPv6 member ever lands in an IPv4 set, nor the reverse
    for name, e in st.entries:
        if e.ip is not None:
            assert (name in ipsets.NAMES6) == (":" in e.ip), (name, e)


def test_ipv6_only_service_and_its_hairpin_and_external_ips():
    svc = service("v6", "fd00:96::20", externalIPs=["2001:db8::7", "203.0.113.7"])
    local = _six("v6", [endpoint("fd00:244::5", node="node-a")])
    st = state(svc, local, opts=DUAL)
    assert set(st.virtual) == {("TCP", "fd00:96::20", 80), ("TCP", "2001:db8::7", 80)}
    assert st.addresses == {"fd00:96::20", "2001:db8::7"}
    assert ("KUBE-6-EXTERNAL-IP", IPSetEntry("2001:db8::7", "tcp", 80)) in st.entries
    assert ("KUBE-6-LOOP-BACK", IPSetEntry("fd00:244::5", "tcp", 8080, "fd00:244::5")) in st.entries
    # the same Service with IPv4 only served: nothing (as before dual-stack)
    assert state(svc, local).virtual == {}


def test_single_stack_state_is_unchanged_by_dual_stack_serving():
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort")
    sl = endpoint_slice("web", [endpoint("10.1.0.1", node="node-a"), "10.1.0.2"])
    assert state(svc, sl, opts=DUAL) == state(svc, sl)
