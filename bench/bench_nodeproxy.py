"""Node proxy benchmark: initial sync and one endpoint change at scale.

For each size (default 1,000 / 5,000 / 10,000 Services, 5 endpoints each):

* initial sync: time of the first (full) sync and the kernel operations it did;
* with that many Services present, one EndpointSlice change (one endpoint
  replaced): time of the partial sync and its kernel operations.

``--kernel fake`` (default) runs on the in-memory kernel model; ``--kernel
linux`` on the running kernel (needs root and IPVS: run it in the VM).
"ops" are logical kernel operations, "trips" the round trips to the kernel
(netlink exchanges and tool runs; with the fake kernel, calls into it, one
per batch). With ``linux`` everything the benchmark created is removed after each
size (``proxier.cleanup``). ``--json`` prints one JSON object per size as well.

What the sync figures include: ``Proxier.sync()`` alone -- translating every
Service, the fixed parts (dummy link, ipsets, iptables), reading the
kernel's state and applying the difference. They exclude, and the
benchmark prints separately: Python start-up and imports (``imports``; a
running node proxy pays them once, before its first sync, and under the
test VM's emulation they cost seconds), creating and probing the kernel
(``kernel set-up``: loading modules), and feeding the Services and
EndpointSlices to the change trackers (``feed``: the informers' handlers,
which parse the objects as they arrive).

Where the time goes: after the table, each sync is broken down into the
proxier's steps (wall time; steps marked "alongside" ran on a thread of
their own, overlapping the others, and "waited for" is what the sync then
still had to wait), the time spent inside the kernel object per method (our
encoding plus the kernel's work) and, with ``linux``, the part of it spent
waiting on the kernel per door (netlink exchanges and /proc reads for
``ipvs``, ``rtnetlink``, ``ipset``; tool runs for ``tools``). The rest of
the sync is our Python: translating, diffing, encoding.

A floor the proxy cannot lower: in the test VM (Debian 6.1 under QEMU's
software emulation) adding 10,000 /32 addresses to kube-ipvs0 takes 11-35 s
of kernel time however they are sent (the kernel walks the link's whole
address list on every insert, so the cost grows with the square of the
count); 60,000 IPVS services and destinations take 2-5 s. The sync adds the
addresses on a thread of its own, so they cost about the time from their
start (after translation and the virtual servers) to their end.

With ``linux``, measure one size per VM boot: IPVS keeps deleted real
servers in a "trash" list for about two minutes and walks that list on
every real-server add, so a size measured after another one's clean-up
pays for it (50,000 real servers took 100 s instead of 3 s that way).

``--no-overlap`` runs what a sync does on threads of its own (the fixed
parts while translating; adding addresses while applying real servers) one
step after the other instead, to show what the overlap buys on this
machine: it needs a second CPU (the test VM has two vCPUs, but QEMU gets
them only when the host has two cores to spare). Its breakdown still names
the "alongside" steps, but their time is then also inside the step that
started them ("changes" for the fixed parts, "ipset members" for the
addresses).

Both modes run side by side (``--modes ipvs,nftables``, the default). The
nftables rows give each sync's time and its transaction's size (rules,
elements and objects added or deleted); with ``linux`` they run in a network
namespace of their own on this machine's kernel: small transactions over our
own netlink encoding, big ones through ``nft -f`` (see ``nftnetlink``);
"(via nft -f)" is the same endpoint change sent through ``nft -f`` alone,
and ``nft no-op`` one empty ``nft -f`` transaction at that size. On a kernel without IPVS
(this machine) the IPVS rows say so and the nftables rows still run; where
both run, the nftables/IPVS ratio of each figure follows.

Usage: python bench/bench_nodeproxy.py [--kernel fake|linux] [--modes ipvs,nftables]
       [--sizes 1000,5000,10000] [--no-overlap]
"""

from __future__ import annotations

import time

_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from platformd.nodeproxy.counting import CountingKernel  # noqa: E402
from platformd.nodeproxy.kernel import MUTATING_METHODS, KernelError  # noqa: E402
from platformd.nodeproxy.proxier import Proxier, ProxierOptions  # noqa: E402

_IMPORTS_S = time.perf_counter() - _START

ENDPOINTS = 5


def _ip(base: int, n: int) -> str:
    return f"{base}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def service(i: int) -> dict:
    ip = _ip(10, (96 << 16) + i + 1)
    return {"metadata": {"name": f"svc-{i}", "namespace": "bench"},
            "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}}


def endpoint_slice(i: int, generation: int = 0) -> dict:
    eps = [{"addresses": [_ip(11, i * ENDPOINTS + j + generation * 7919 * ENDPOINTS)],
            "conditions": {"ready": True}, "nodeName": f"node-{j}"} for j in range(ENDPOINTS)]
    return {"metadata": {"name": f"svc-{i}-x", "namespace": "bench",
                         "labels": {"kubernetes.io/service-name": f"svc-{i}"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": eps}


class _Inline:
    """``background.Background`` run at once on the caller's thread: the
    sync without its overlapping work, for ``--no-overlap``."""

    def __init__(self, fn, name: str) -> None:
        t0 = time.perf_counter()
        self._error, self._result = None, None
        try:
            self._result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back by wait(), as Background does
            self._error = exc
        self.seconds = time.perf_counter() - t0

    def join(self) -> None:
        pass

    def wait(self):
        if self._error is not None:
            raise self._error
        return self._result


def make_kernel(kind: str):
    if kind == "fake":
        from platformd.nodeproxy.fakekernel import FakeKernel
        return FakeKernel()
    from platformd.nodeproxy.kernel_linux import LinuxKernel
    kernel = LinuxKernel()
    kernel.probe(["rr"])
    return kernel


def _ops(counting: CountingKernel) -> dict:
    """Logical operations (by method; an op inside a batch counts as its
    method), calls into the kernel object (``batches``: one ``apply`` is one)
    and, with the linux kernel, real round trips (netlink exchanges and tool runs)."""
    writes = counting.writes
    return {"operations": writes + counting.reads, "writes": writes, "reads": counting.reads,
            "batches": counting.batches, "round_trips": counting.round_trips,
            "by_method": dict(sorted(counting.counts.items()))}


def _busy(inner) -> dict[str, float]:
    """The inner kernel's time waiting on the kernel by door (LinuxKernel only)."""
    return dict(getattr(inner, "busy_seconds", None) or {})


def _breakdown(result, counting: CountingKernel, busy_before: dict[str, float]) -> dict:
    """Where one sync's time went: the proxier's steps (wall), the time
    inside the kernel object per method (our encoding plus the kernel's
    work) and, with the linux kernel, the part spent waiting on the kernel
    per door (netlink exchanges, /proc reads, tool runs)."""
    busy = {door: round(s - busy_before.get(door, 0.0), 4) for door, s in _busy(counting.inner).items()}
    return {"steps": {name: round(s, 4) for name, s in result.steps},
            "in_kernel_object": {m: round(s, 4) for m, s in sorted(counting.seconds.items())},
            "kernel_busy": busy}


def bench_size(kind: str, n: int) -> dict:
    t0 = time.perf_counter()
    inner = make_kernel(kind)
    kernel_setup = time.perf_counter() - t0
    kernel = CountingKernel(inner)
    proxier = Proxier(kernel, ProxierOptions(hostname="bench-node", sync_period=3600))
    try:
        feed = _feed(proxier, n)

        _, initial, initial_ops, initial_breakdown = _measured_sync(proxier, kernel)

        # One endpoint of one Service replaced by another address.
        target = n // 2
        _move_endpoint(proxier, target)
        result, change, change_ops, _ = _measured_sync(proxier, kernel)
        assert not result.full

        # A forced full reconcile with nothing to repair: the periodic cost.
        proxier._needs_full = True  # noqa: SLF001 - benchmark reaches in on purpose
        _, full, full_ops, full_breakdown = _measured_sync(proxier, kernel)
    finally:
        if kind == "linux":
            proxier.cleanup()
        inner.close()
    return {"kernel": kind, "services": n, "endpoints_per_service": ENDPOINTS,
            "kernel_setup_s": round(kernel_setup, 4), "feed_events_s": round(feed, 4),
            "initial_sync_s": round(initial, 4), "initial_ops": initial_ops,
            "initial_breakdown": initial_breakdown, "full_resync_breakdown": full_breakdown,
            "endpoint_change_s": round(change, 6), "endpoint_change_ops": change_ops,
            "full_resync_s": round(full, 4), "full_resync_ops": full_ops}


def _feed(proxier, n: int) -> float:
    """Hands ``n`` Services and their slices to ``proxier``; the seconds it took."""
    t0 = time.perf_counter()
    for i in range(n):
        proxier.on_service(None, service(i))
        proxier.on_slice(None, endpoint_slice(i))
    return time.perf_counter() - t0


def _move_endpoint(proxier, target: int) -> None:
    """Service ``target``'s first endpoint replaced by another address."""
    old = endpoint_slice(target)
    new = endpoint_slice(target)
    new["endpoints"][0] = {"addresses": [_ip(12, target)], "conditions": {"ready": True}, "nodeName": "node-0"}
    proxier.on_slice(old, new)


def _measured_sync(proxier: Proxier, kernel: CountingKernel) -> tuple[object, float, dict, dict]:
    """One ``proxier.sync()`` with the counters reset before it: (its result,
    wall seconds, ``_ops``, ``_breakdown``)."""
    kernel.reset()
    busy = _busy(kernel.inner)
    t0 = time.perf_counter()
    result = proxier.sync()
    seconds = time.perf_counter() - t0
    return result, seconds, _ops(kernel), _breakdown(result, kernel, busy)


def _own_netns() -> None:
    """Move this process into a new network namespace (root): the nftables
    table and everything it does stay there and vanish with the process."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) (needs root)")


def bench_nft_size(kind: str, n: int) -> dict:
    """The nftables mode at ``n`` Services: initial sync, one endpoint
    change, full resync; each with its transaction's size."""
    from platformd.nodeproxy.nftproxier import NftProxier
    if kind == "fake":
        from platformd.nodeproxy.nftfake import FakeNft
        kernel = FakeNft()
    else:
        from platformd.nodeproxy.nftnetlink import NftNetlink
        kernel = NftNetlink()
        kernel.probe()
        kernel.delete_table()  # a previous size's table
    proxier = NftProxier(kernel, ProxierOptions(hostname="bench-node", ipv6=True, node_ips=("192.168.0.1",),
                                                cluster_cidr="10.0.0.0/8", sync_period=3600))
    try:
        feed = _feed(proxier, n)

        t0 = time.perf_counter()
        result = proxier.sync()
        initial = time.perf_counter() - t0
        initial_size = proxier.last_transaction_size
        initial_steps = {name: round(sec, 4) for name, sec in result.steps}

        changes = []
        for target in sorted({n // 2, n // 3, n // 5, n // 7, n // 11}):  # distinct Services
            _move_endpoint(proxier, target)
            t0 = time.perf_counter()
            result = proxier.sync()
            changes.append((time.perf_counter() - t0, proxier.last_transaction_size, result))
            assert not result.full
        change, change_size, change_result = min(changes, key=lambda c: c[0])
        # The same kind of change through nft -f alone (what NftNetlink saves).
        change_nft = None
        if kind == "linux":
            from platformd.nodeproxy.nftkernel import NftCli
            kernel.transact = lambda ops, create_table=False: NftCli.transact(kernel, ops, create_table)
            times = []
            for target in (n // 2 + 1, n // 3 + 1, n // 5 + 1):
                _move_endpoint(proxier, target)
                t0 = time.perf_counter()
                proxier.sync()
                times.append(time.perf_counter() - t0)
            del kernel.transact
            change_nft = min(times)

        proxier._needs_full = True  # noqa: SLF001 - benchmark reaches in on purpose
        t0 = time.perf_counter()
        result = proxier.sync()
        full = time.perf_counter() - t0
        full_size = proxier.last_transaction_size
        full_steps = {name: round(sec, 4) for name, sec in result.steps}

        t0 = time.perf_counter()
        kernel.transact([], create_table=True)
        noop = time.perf_counter() - t0
    finally:
        if kind == "linux":
            kernel.delete_table()
    return {"mode": "nftables", "kernel": kind, "services": n, "endpoints_per_service": ENDPOINTS,
            "feed_events_s": round(feed, 4), "initial_sync_s": round(initial, 4),
            "initial_transaction_size": initial_size, "initial_steps": initial_steps,
            "endpoint_change_s": round(change, 6), "endpoint_change_transaction_size": change_size,
            "endpoint_change_nft_f_s": round(change_nft, 6) if change_nft is not None else None,
            "endpoint_change_steps": {name: round(sec, 5) for name, sec in change_result.steps},
            "full_resync_s": round(full, 4), "full_resync_transaction_size": full_size,
            "full_resync_steps": full_steps, "nft_noop_s": round(noop, 5)}


def _print_breakdown(title: str, b: dict) -> None:
    def line(parts: dict) -> str:
        return ", ".join(f"{name} {s:.2f}s" for name, s in parts.items()) or "-"
    print(f"{title}:")
    print(f"  proxier steps (wall): {line(b['steps'])}")
    print(f"  inside the kernel object, by method: {line(b['in_kernel_object'])}")
    if b["kernel_busy"]:
        print(f"  of which waiting on the kernel, by door: {line(b['kernel_busy'])}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", choices=("fake", "linux"), default="fake")
    p.add_argument("--sizes", default="1000,5000,10000")
    p.add_argument("--modes", default="ipvs,nftables", help="ipvs, nftables or both (default)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-overlap", action="store_true",
                   help="run the work a sync overlaps (fixed parts, adding addresses) one step after the other")
    args = p.parse_args(argv)
    if args.no_overlap:
        import platformd.nodeproxy.proxier as proxier_module
        proxier_module.Background = _Inline  # the benchmark reaches in on purpose
    sizes = [int(s) for s in args.sizes.split(",") if s]

    modes = [m for m in args.modes.split(",") if m]
    if "nftables" in modes and args.kernel == "linux":
        _own_netns()
    results = _bench_ipvs(args, sizes) if "ipvs" in modes else []
    if results is None:
        return 1
    nft = _bench_nft(args.kernel, sizes) if "nftables" in modes else []
    if results and nft:
        _print_ratios(results, nft)
    if args.json:
        for r in results + nft:
            print(json.dumps(r))
    return 0


def _bench_ipvs(args, sizes: list[int]) -> list[dict] | None:
    print(f"IPVS mode, kernel={args.kernel}, {ENDPOINTS} endpoints per Service"
          + (", no overlap" if args.no_overlap else ""))
    header = (f"{'services':>8}  {'initial sync':>12}  {'ops (writes) trips':>20}  "
              f"{'1 endpoint chg':>14}  {'ops (writes) trips':>18}  {'full resync':>11}  {'ops (writes) trips':>20}")
    print(header)
    results = []
    for n in sizes:
        try:
            r = bench_size(args.kernel, n)
        except KernelError as err:
            print(f"  IPVS not measured: {err}", flush=True)
            return []
        results.append(r)
        io, co, fo = r["initial_ops"], r["endpoint_change_ops"], r["full_resync_ops"]
        print(f"{n:>8}  {r['initial_sync_s']:>11.3f}s  {io['operations']:>6} ({io['writes']:>6}) {io['round_trips']:>5}  "
              f"{r['endpoint_change_s'] * 1000:>12.2f}ms  {co['operations']:>4} ({co['writes']:>4}) {co['round_trips']:>5}  "
              f"{r['full_resync_s']:>10.3f}s  {fo['operations']:>6} ({fo['writes']:>4}) {fo['round_trips']:>5}", flush=True)
    print("excluded from the sync figures: imports {:.2f}s; per size kernel set-up (import, probe) "
          "and feeding the trackers: {}".format(
              _IMPORTS_S, ", ".join(f"{r['services']}: {r['kernel_setup_s']:.2f}s + {r['feed_events_s']:.2f}s"
                                    for r in results)))
    for r in results:
        for label, key in (("initial sync", "initial_breakdown"), ("full resync", "full_resync_breakdown")):
            _print_breakdown(f"{label} of {r['services']} Services", r[key])
    last = results[-1]
    print(f"one endpoint change with {last['services']} Services: "
          f"{last['endpoint_change_ops']['by_method']}")
    return results


def _bench_nft(kind: str, sizes: list[int]) -> list[dict]:
    where = "nft -f in a network namespace of its own" if kind == "linux" else "in-memory table model"
    print(f"nftables mode, kernel={kind} ({where}), {ENDPOINTS} endpoints per Service")
    print(f"{'services':>8}  {'initial sync':>12}  {'txn size':>8}  {'1 endpoint chg':>14}  {'txn size':>8}  "
          f"{'(via nft -f)':>12}  {'full resync':>11}  {'txn size':>8}  {'nft no-op':>9}")
    results = []
    for n in sizes:
        r = bench_nft_size(kind, n)
        results.append(r)
        print(f"{n:>8}  {r['initial_sync_s']:>11.3f}s  {r['initial_transaction_size']:>8}  "
              f"{r['endpoint_change_s'] * 1000:>12.2f}ms  {r['endpoint_change_transaction_size']:>8}  "
              f"{_ms(r['endpoint_change_nft_f_s']):>12}  "
              f"{r['full_resync_s']:>10.3f}s  {r['full_resync_transaction_size']:>8}  "
              f"{r['nft_noop_s'] * 1000:>7.2f}ms", flush=True)
    for r in results:
        print(f"steps at {r['services']}: initial {r['initial_steps']}; one endpoint change "
              f"{r['endpoint_change_steps']}; full resync {r['full_resync_steps']}")
    return results


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f}ms"


def _print_ratios(ipvs: list[dict], nft: list[dict]) -> None:
    print("nftables / IPVS, per figure (below 1: nftables is faster)")
    print(f"{'services':>8}  {'initial sync':>12}  {'1 endpoint chg':>14}  {'full resync':>11}")
    by_size = {r["services"]: r for r in ipvs}
    for r in nft:
        i = by_size.get(r["services"])
        if i is None:
            continue

        def ratio(key: str) -> str:
            return f"{r[key] / i[key]:.2f}" if i[key] else "-"
        print(f"{r['services']:>8}  {ratio('initial_sync_s'):>12}  {ratio('endpoint_change_s'):>14}  "
              f"{ratio('full_resync_s'):>11}")


if __name__ == "__main__":
    assert MUTATING_METHODS  # the counting below relies on the kernel's method lists
    sys.exit(main())
