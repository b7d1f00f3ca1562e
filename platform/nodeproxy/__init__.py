"""The node proxy (kube-proxy's IPVS or nftables mode), syncing only what changed.

Modules, from the outside in:

* ``main`` -- flags and wiring: informers -> proxier handlers, the
  bounded-frequency runner, health and metrics listeners.
* ``proxier`` -- the sync: partial (only what changed) and full (against the
  kernel's actual state, repairing drift).
* ``changetracker`` -- ``{previous, current}`` per Service / EndpointSlice.
* ``translate`` -- Service + EndpointSlices -> one Service's kernel state (pure).
* ``desired`` -- the state all Services ask for, with shared-object refcounts.
* ``graceful`` -- weight 0, then delete when connections end (TCP).
* ``iptables``, ``ipsets``, ``sysctls`` -- the fixed parts, as kube-proxy has them.
* ``health``, ``metrics`` -- ``/healthz``, ``/status`` and ``/metrics``.
* ``cleanup`` -- ``--cleanup``; ``ipvsview`` -- ``platformctl ipvs``.
* ``kernel`` -- the one interface to the kernel; ``kernel_linux`` (hand-encoded netlink),
  ``fakekernel`` (in memory), ``dryrun`` (prints), ``counting`` (counts).

The nftables mode (``--proxy-mode nftables``) replaces the proxier and its door:

* ``nftproxier`` -- the sync: one atomic transaction of what changed;
* ``nftrules`` -- Service + EndpointSlices -> chains and map elements (pure);
* ``nftdesired`` -- the table all Services ask for, with element owners;
* ``nftmodel`` -- the table as data, ``plan`` (the diff), nft text in and out;
* ``nftkernel`` -- ``nft -f`` (and why not netlink), ``nftfake`` (in memory);
* ``healthcheck`` -- health-check node ports of Local LoadBalancers.
"""
