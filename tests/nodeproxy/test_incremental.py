"""Incremental syncs must end where a sync from scratch ends.

Random Services and EndpointSlices are changed step by step; after every
partial sync the in-memory kernel must equal the kernel a brand-new proxier
builds from the final objects in one full sync.
"""

import random

import pytest

from platformd.common.clock import FakeClock
from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.proxier import Proxier, ProxierOptions

from .objects import endpoint, endpoint_slice, service

OPTS = ProxierOptions(hostname="node-a", node_ips=("192.168.1.10",), sync_period=1e9)


def random_service(rng, i):
    kind = rng.choice(["ClusterIP", "NodePort", "LoadBalancer"])
    proto = rng.choice(["TCP", "TCP", "UDP", "SCTP"])
    port = rng.choice([80, 443, 53])
    node_port = 30000 + i * 3 + rng.randrange(3) if kind != "ClusterIP" else None
    ports = ((port, proto, node_port),) if node_port else ((port, proto),)
    spec = {"type": kind}
    if rng.random() < 0.3:
        spec["externalIPs"] = [rng.choice(["203.0.113.1", "203.0.113.2"])]
    if rng.random() < 0.3:
        spec["sessionAffinity"] = "ClientIP"
    if kind != "ClusterIP" and rng.random() < 0.4:
        spec["externalTrafficPolicy"] = "Local"
    if rng.random() < 0.2:
        spec["internalTrafficPolicy"] = "Local"
    if kind == "LoadBalancer":
        spec["status"] = {"loadBalancer": {"ingress": [{"ip": rng.choice(["198.51.100.1", "198.51.100.2"])}]}}
    return service(f"s{i}", f"10.96.0.{i + 1}", ports=ports, **spec), proto


def random_slice(rng, i, proto):
    eps = [endpoint(f"10.1.{i}.{rng.randrange(1, 6)}", ready=rng.random() < 0.8,
                    serving=rng.random() < 0.5, terminating=rng.random() < 0.3,
                    node=rng.choice(["node-a", "node-b"]))
           for _ in range(rng.randrange(0, 4))]
    return endpoint_slice(f"s{i}", eps, ports=((rng.choice([8080, 9090]), proto),))


def state_of(kernel: FakeKernel):
    return ({vs: reals for vs, reals in kernel.snapshot().items()},
            {n: set(members) for n, (_, members) in kernel.ipsets.items()},
            {k: set(v) for k, v in kernel.links.items()})


@pytest.mark.parametrize("seed", range(20))
def test_incremental_equals_from_scratch(seed):
    rng = random.Random(seed)
    clock = FakeClock()
    kernel = FakeKernel()
    proxier = Proxier(kernel, OPTS, clock)
    services, slices = {}, {}
    for step in range(60):
        i = rng.randrange(12)
        action = rng.random()
        if action < 0.35:
            new, proto = random_service(rng, i)
            proxier.on_service(services.get(i, (None,))[0], new)
            services[i] = (new, proto)
        elif action < 0.45 and i in services:
            proxier.on_service(services.pop(i)[0], None)
        elif action < 0.9 and i in services:
            new = random_slice(rng, i, services[i][1])
            proxier.on_slice(slices.get(i), new)
            slices[i] = new
        elif i in slices:
            proxier.on_slice(slices.pop(i), None)
        clock.advance(0.5)
        result = proxier.sync()
        assert step == 0 or not result.full

        fresh_kernel = FakeKernel()
        fresh = Proxier(fresh_kernel, OPTS, FakeClock())
        for svc, _ in services.values():
            fresh.on_service(None, svc)
        for sl in slices.values():
            fresh.on_slice(None, sl)
        fresh.sync()
        assert state_of(kernel) == state_of(fresh_kernel), f"seed {seed} step {step}"
