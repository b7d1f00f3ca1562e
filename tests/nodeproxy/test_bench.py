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
