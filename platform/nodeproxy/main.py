"""``platformd nodeproxy``: the node proxy's command line and wiring.

``--proxy-mode ipvs`` (default) or ``nftables``; both share the informers,
change trackers, runner, health and metrics; they differ in the proxier
(:class:`~.proxier.Proxier` / :class:`~.nftproxier.NftProxier`) and its kernel
door (:class:`~.kernel.Kernel` / :class:`~.nftkernel.NftKernel`).

Order of start-up, and why:

1. flags; ``--cleanup`` removes everything and exits;
2. ``probe`` the kernel -- a kernel without IPVS (or nftables, in that
   mode) gets one line naming what is missing and exit status 1
   (``--dry-run`` never touches the kernel, so it works there);
3. sysctls (IPVS mode), each failure reported by name (any failure stops
   us, as in kube-proxy);
4. informers for Services, EndpointSlices and this node's Node; their handlers
   only feed the change trackers;
5. only once every informer has synced is the sync runner started: syncing a
   half-filled cache would delete the Services not listed yet;
6. health and metrics listeners; run until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import socket
import sys
import threading
from typing import Sequence

from platformd.common.clock import REAL_CLOCK
from platformd.common.runner import BoundedFrequencyRunner

from . import sysctls
from .health import HTTPEndpoint, ProxierHealth
from .kernel import SCHEDULERS, Firewall, IPVSUnavailable, Kernel, KernelError
from .cleanup import remove_everything
from .proxier import Proxier, ProxierOptions

log = logging.getLogger("platformd.nodeproxy")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}

#: A failed sync is retried after this long (never sooner than --min-sync-period):
#: soon enough that a transient netlink error heals within seconds, rare enough
#: that a persistent one does not turn into a busy loop of full syncs.
RETRY_INTERVAL = 5.0
#: How often terminating real servers are checked for remaining connections.
GRACEFUL_CHECK_INTERVAL = 5.0


def duration(text: str) -> float:
    """Go-style durations as kube-proxy takes them ("1s", "500ms", "1m30s"), or plain seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 30s, 500ms, 1m)")
    return total


def _ip_list_argument(text: str) -> list[str]:
    """One IP or a comma-separated list (the downward API's ``status.hostIPs``)."""
    from .translate import canonical, is_ip
    out = []
    for item in text.split(","):
        if not is_ip(item.strip()):
            raise argparse.ArgumentTypeError(f"invalid IP address {item.strip()!r}")
        out.append(canonical(item.strip()))
    return out


DUAL_STACK_CHOICES = ("auto", "true", "false")


def wants_dual_stack(choice: str, node_ips: Sequence[str], ipv6_supported: bool, mode: str) -> bool:
    """Whether to serve IPv6 as well as IPv4 (``--dual-stack``).

    ``true``/``false`` as given. ``auto`` decides from the node, as
    kube-proxy does: both families when the node has IPv6 (``ipv6_supported``:
    IPv6 in the kernel, and ip6tables in the IPVS mode) and ``--node-ip``
    names addresses of both families. Without ``--node-ip`` (node IPs read
    from the Node object later) each mode keeps its behaviour from before the
    flag: IPv4 only in the IPVS mode, both families in the nftables mode (its
    one ``inet`` table serves IPv6 without another tool).
    """
    if choice != "auto":
        return choice == "true"
    if not ipv6_supported:
        return False
    if not node_ips:
        return mode == "nftables"
    from .translate import family_of
    return {family_of(ip) for ip in node_ips} == {4, 6}


def _kernel_has_ipv6() -> bool:
    return os.path.exists("/proc/net/if_inet6")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="platformd nodeproxy",
                                description="Node proxy (kube-proxy's IPVS or nftables mode).")
    p.add_argument("--proxy-mode", choices=("ipvs", "nftables"), default="ipvs",
                   help="ipvs (default) or nftables")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, KUBECONFIG, ~/.kube/config)")
    p.add_argument("--source", metavar="DIR", help="read Services/EndpointSlices/Nodes from manifests in DIR")
    p.add_argument("--hostname", default=os.environ.get("NODE_NAME") or socket.gethostname().lower(),
                   help="this node's name (default: $NODE_NAME or the host name)")
    p.add_argument("--node-ip", action="extend", default=[], metavar="IP[,IP]", type=_ip_list_argument,
                   help="node IP(s) for node ports (repeatable or comma-separated, e.g. the downward API's "
                        "status.hostIPs; default: the Node's InternalIP/ExternalIP)")
    p.add_argument("--cluster-cidr", default="",
                   help="pod CIDR(s), comma-separated for dual-stack; cluster-IP traffic from outside is masqueraded")
    p.add_argument("--masquerade-all", action="store_true", help="masquerade all traffic to cluster IPs")
    p.add_argument("--dual-stack", nargs="?", const="true", default="auto", choices=DUAL_STACK_CHOICES,
                   help="serve IPv6 as well as IPv4 (IPVS mode: IPv6 virtual servers, KUBE-6- ipsets, ip6tables; "
                        "nftables mode: the ip6 half of its table). auto (default): when --node-ip has both "
                        "families and the node has IPv6; without --node-ip, IPv4 only in IPVS mode and both "
                        "in nftables mode. A bare --dual-stack means true"),
    p.add_argument("--scheduler", default="rr", choices=SCHEDULERS, help="IPVS scheduler (default rr; IPVS mode only)")
    p.add_argument("--min-sync-period", type=duration, default=1.0, help="minimum gap between syncs (1s)")
    p.add_argument("--sync-period", type=duration, default=30.0, help="full reconcile period (30s)")
    p.add_argument("--strict-arp", action="store_true", help="set arp_ignore=1, arp_announce=2 (IPVS mode only)")
    p.add_argument("--tcp-timeout", type=duration, default=0.0, help="IPVS TCP timeout (0: leave; IPVS mode only)")
    p.add_argument("--tcp-fin-timeout", type=duration, default=0.0, help="IPVS TCP FIN_WAIT timeout (0: leave; IPVS mode only)")
    p.add_argument("--udp-timeout", type=duration, default=0.0, help="IPVS UDP timeout (0: leave; IPVS mode only)")
    p.add_argument("--graceful-termination-timeout", type=duration, default=600.0,
                   help="delete a quiesced TCP real server after this long even with connections (600s; IPVS mode only)")
    p.add_argument("--healthz-bind-address", default="0.0.0.0:10256", help="kube-proxy's /healthz and /status ('' disables)")
    p.add_argument("--metrics-bind-address", default="127.0.0.1:10249", help="/metrics ('' disables)")
    p.add_argument("--dry-run", action="store_true", help="print the kernel operations instead of doing them")
    p.add_argument("--once", action="store_true", help="exit after the first sync")
    p.add_argument("--cleanup", action="store_true", help="remove everything the node proxy created, then exit")
    return p


def options_from(args: argparse.Namespace, ipv6: bool = False) -> ProxierOptions:
    return ProxierOptions(
        hostname=args.hostname, node_ips=tuple(args.node_ip), scheduler=args.scheduler,
        masquerade_all=args.masquerade_all, cluster_cidr=args.cluster_cidr,
        sync_period=args.sync_period, strict_arp=args.strict_arp,
        tcp_timeout=int(args.tcp_timeout), tcp_fin_timeout=int(args.tcp_fin_timeout),
        udp_timeout=int(args.udp_timeout), graceful_timeout=args.graceful_termination_timeout,
        ipv6=ipv6)


def make_kernel(args: argparse.Namespace):
    if args.proxy_mode == "nftables":
        from .nftkernel import DryRunNft
        from .nftnetlink import NftNetlink
        return DryRunNft() if args.dry_run else NftNetlink()
    if args.dry_run:
        from .dryrun import DryRunKernel
        return DryRunKernel()
    from .kernel_linux import LinuxKernel
    return LinuxKernel()


def make_ip6tables(args: argparse.Namespace):
    """The :class:`~.kernel.Firewall` the IPVS mode's IPv6 rules go through
    (its tool is ip6tables): with ``--dual-stack=true``; with ``auto`` and for
    ``--cleanup`` wherever ip6tables is installed and the kernel has IPv6 (an
    earlier dual-stack run may have left chains). None means no IPv6 here."""
    if args.proxy_mode != "ipvs" or args.dual_stack == "false" and not args.cleanup:
        return None
    if args.dry_run:
        from .dryrun import DryRunKernel
        return DryRunKernel(label="dry-run ip6tables").firewall
    if args.dual_stack != "true" and (shutil.which("ip6tables-restore") is None or not _kernel_has_ipv6()):
        return None
    from .kernel_firewall import LinuxFirewall
    return LinuxFirewall(iptables="ip6tables")


def make_source(args: argparse.Namespace):
    if args.source:
        from platformd.common.filesource import FileSource
        return FileSource(args.source)
    from platformd.common import kubeclient
    from platformd.common.apisource import ApiSource
    return ApiSource(kubeclient.load(args.kubeconfig))


class _Handler:
    """Informer handler calling ``fn(previous, current)``; tombstones unwrapped."""

    def __init__(self, fn) -> None:
        self._fn = fn

    def on_add(self, obj: dict) -> None:
        self._fn(None, obj)

    def on_update(self, old: dict, new: dict) -> None:
        self._fn(old, new)

    def on_delete(self, obj) -> None:
        self._fn(getattr(obj, "obj", obj), None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from platformd.common import logs
        logs.setup("nodeproxy")
    except Exception:  # noqa: BLE001 - logging set-up must never stop the proxy
        logging.basicConfig(level=logging.INFO)
    return run(args)


def run(args: argparse.Namespace, kernel: Kernel | None = None, stop: threading.Event | None = None,
        clock=REAL_CLOCK, ip6tables: Firewall | None = None) -> int:
    """Run the node proxy until ``stop`` is set (or a signal). Returns the exit status.
    ``ip6tables`` is made from the flags only when ``kernel`` is too."""
    if kernel is None:
        kernel, ip6tables = make_kernel(args), ip6tables or make_ip6tables(args)
    stop = stop or threading.Event()
    try:
        return _run(args, kernel, stop, clock, ip6tables)
    finally:
        kernel.close()  # the ip6tables firewall runs tools: nothing to close


def _fail(message: str) -> int:
    print(f"nodeproxy: {message}", file=sys.stderr, flush=True)
    return 1


def _run(args, kernel, stop: threading.Event, clock, ip6tables: Firewall | None = None) -> int:
    ipv6_supported = _kernel_has_ipv6() if args.proxy_mode == "nftables" else ip6tables is not None
    opts = options_from(args, wants_dual_stack(args.dual_stack, args.node_ip, ipv6_supported, args.proxy_mode))
    log.info("serving %s (--dual-stack=%s, node IPs %s)", "IPv4 and IPv6" if opts.ipv6 else "IPv4 only",
             args.dual_stack, ",".join(args.node_ip) or "from the Node")
    if args.proxy_mode == "nftables":
        return _run_nftables(args, kernel, opts, stop, clock)
    if args.cleanup:
        failures = remove_everything(kernel, opts.node_ips, ip6tables)
        for f in failures:
            print(f"nodeproxy: cleanup: {f}", file=sys.stderr)
        return 1 if failures else 0
    try:
        kernel.probe([args.scheduler])
    except IPVSUnavailable as err:
        return _fail(f"{err} (IPVS mode needs it; try `modprobe {err.module}`)")
    except KernelError as err:
        return _fail(f"kernel check failed: {err}")

    if opts.ipv6 and ip6tables is None:
        return _fail("--dual-stack=true needs ip6tables")
    proxier = Proxier(kernel, opts, clock, ip6tables=ip6tables)
    failures = proxier.setup_sysctls()
    if failures:
        for failure in failures[:-1]:
            print(f"nodeproxy: {failure}", file=sys.stderr)
        return _fail(failures[-1])
    warning = sysctls.advice(kernel.sysctl)
    if warning:
        log.warning("%s", warning)
    return _serve(args, proxier, stop, clock)


def _run_nftables(args, kernel, opts: ProxierOptions, stop: threading.Event, clock) -> int:
    from .healthcheck import HealthCheckServers
    from .nftkernel import NftUnavailable
    from .nftproxier import NftProxier
    if args.cleanup:
        try:
            kernel.delete_table()
        except KernelError as err:
            print(f"nodeproxy: cleanup: {err}", file=sys.stderr)
            return 1
        return 0
    try:
        kernel.probe()
    except NftUnavailable as err:
        return _fail(f"{err} (nftables mode needs the nft tool and nf_tables in the kernel)")
    except KernelError as err:
        return _fail(f"kernel check failed: {err}")
    health = ProxierHealth(2 * opts.sync_period, clock)
    # Health-check node ports answer "unhealthy" while this proxy is, as kube-proxy's do.
    checks = None if args.dry_run else HealthCheckServers(proxy_healthy=lambda: health.status()[0])
    proxier = NftProxier(kernel, opts, clock, health=health, health_checks=checks)
    try:
        return _serve(args, proxier, stop, clock)
    finally:
        if checks is not None:
            checks.close()


def _serve(args, proxier: Proxier, stop: threading.Event, clock) -> int:
    opts = proxier.opts
    try:
        source = make_source(args)
    except Exception as err:  # KubeConfigError and friends: one line, no traceback
        status = _fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
        from platformd.common import errors
        return errors.EXIT_CONFIG if isinstance(err, errors.KubeConfigError) else status

    from platformd.common import resources
    from platformd.common.informer import InformerFactory
    factory = InformerFactory(source)
    factory.informer(resources.SERVICES).add_handler(_Handler(proxier.on_service))
    factory.informer(resources.ENDPOINT_SLICES).add_handler(_Handler(proxier.on_slice))
    hostname = opts.hostname

    def on_node(previous, current):
        obj = current or previous
        if (obj.get("metadata") or {}).get("name") == hostname:
            proxier.on_node(current)

    factory.informer(resources.NODES).add_handler(_Handler(on_node))

    servers = []
    try:
        same = args.metrics_bind_address == args.healthz_bind_address
        if args.healthz_bind_address:
            servers.append(HTTPEndpoint(args.healthz_bind_address, health=proxier.health, status=proxier.status,
                                        registry=proxier.metrics.registry if same else None))
        if args.metrics_bind_address and not same:
            servers.append(HTTPEndpoint(args.metrics_bind_address, registry=proxier.metrics.registry))
    except OSError as err:
        return _fail(f"cannot listen: {err}")
    for s in servers:
        s.start()

    _install_signal_handlers(stop)
    factory.start()
    try:
        while not factory.wait_for_sync(1.0):
            if stop.is_set():
                return 0
        log.info("caches synced; starting the sync loop")
        if args.once:
            proxier.sync()
            return 0
        runner = BoundedFrequencyRunner("nodeproxy-sync", proxier.sync, args.min_sync_period,
                                        args.sync_period, max(RETRY_INTERVAL, args.min_sync_period), clock)
        proxier.set_trigger(runner.run)
        runner.run()
        threading.Thread(target=_graceful_ticker, args=(proxier, runner, stop, clock),
                         name="nodeproxy-graceful", daemon=True).start()
        runner.loop(stop)
        return 0
    except KernelError as err:
        return _fail(f"sync failed: {err}")
    finally:
        factory.stop()
        for s in servers:
            s.stop()
        close = getattr(source, "close", None)
        if close:
            close()


def _graceful_ticker(proxier: Proxier, runner: BoundedFrequencyRunner, stop: threading.Event, clock) -> None:
    """Ask for a sync while real servers wait for their connections to end:
    a sync with no changes only checks them (one listing per virtual server)."""
    while not clock.wait(stop, GRACEFUL_CHECK_INTERVAL):
        if len(proxier.graceful):
            runner.run()


def _install_signal_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # tests run us in a thread and stop us with the event
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())


if __name__ == "__main__":
    sys.exit(main())
