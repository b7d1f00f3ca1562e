import importlib.util
import pathlib

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "bench_nodeproxy.py"


def test_benchmark_runs_small():
    spec = importlib.util.spec_from_file_location("bench_nodeproxy", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.bench_size("fake", 50)
    assert r["initial_ops"]["writes"] >= 50 * (1 + 5 + 1 + 1)  # VS, reals, address, ipset member
    assert r["endpoint_change_ops"]["operations"] <= 4
    assert r["full_resync_ops"]["writes"] <= 20  # nothing to repair: only the fixed parts


def test_benchmark_breaks_each_sync_down():
    spec = importlib.util.spec_from_file_location("bench_nodeproxy", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.bench_size("fake", 20)
    initial = r["initial_breakdown"]
    assert {"translate", "base (alongside)", "virtual servers", "real servers",
            "addresses added (alongside)"} <= set(initial["steps"])
    # one apply per kind of op, timed under its method
    assert {"add_address", "add_real_server", "add_virtual_server", "add_ipset_entry",
            "restore_iptables"} <= set(initial["in_kernel_object"])
    assert initial["kernel_busy"] == {}  # only LinuxKernel waits on a kernel
    assert "read kernel" in r["full_resync_breakdown"]["steps"]


def test_benchmark_nftables_change_transaction_does_not_grow_with_services():
    spec = importlib.util.spec_from_file_location("bench_nodeproxy", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small, big = bench.bench_nft_size("fake", 20), bench.bench_nft_size("fake", 400)
    assert small["endpoint_change_transaction_size"] == big["endpoint_change_transaction_size"] <= 10
    assert big["full_resync_transaction_size"] == 0
    assert big["initial_transaction_size"] > small["initial_transaction_size"] + 380 * 5
