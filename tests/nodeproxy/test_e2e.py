"""The node proxy end to end on the host: real informers (file source and the
fake API server) feeding the proxier, with the in-memory kernel."""

import functools
import threading

import pytest
import yaml

from platformd.nodeproxy.fakekernel import FakeKernel
from platformd.nodeproxy.main import build_parser, run
from tests.helpers.waiting import wait_for

from .objects import endpoint_slice, service


eventually = functools.partial(wait_for, timeout=15.0, interval=0.05, ignore=(KeyError, AssertionError))


class Running:
    def __init__(self, argv):
        self.kernel = FakeKernel()
        self.stop = threading.Event()
        self.args = build_parser().parse_args(argv + ["--healthz-bind-address", "", "--metrics-bind-address", "",
                                                      "--min-sync-period", "0.05", "--sync-period", "2"])
        self.status = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.status = run(self.args, kernel=self.kernel, stop=self.stop)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        assert self.status == 0

    def reals(self, key):
        return self.kernel.snapshot().get(self.kernel.virtual.get(key))


def write(path, *objs):
    path.write_text(yaml.safe_dump_all(list(objs)))


def test_file_source_converges(tmp_path):
    write(tmp_path / "web.yaml", service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.1", "10.1.0.2"]))
    key = ("TCP", "10.96.0.10", 80)
    with Running(["--source", str(tmp_path), "--hostname", "node-a", "--node-ip", "192.168.1.10"]) as r:
        eventually(lambda: r.reals(key) == {("10.1.0.1", 8080): 1, ("10.1.0.2", 8080): 1})
        write(tmp_path / "web.yaml", service("web", "10.96.0.10"), endpoint_slice("web", ["10.1.0.3"]))
        eventually(lambda: r.reals(key) == {("10.1.0.3", 8080): 1})
        # drift repaired by the periodic full sync
        r.kernel.delete_virtual_server(r.kernel.virtual[key])
        eventually(lambda: r.reals(key) == {("10.1.0.3", 8080): 1}, timeout=10)
        (tmp_path / "web.yaml").unlink()
        eventually(lambda: r.kernel.virtual == {} and r.kernel.links["kube-ipvs0"] == set())


@pytest.fixture
def api(tmp_path):
    from tests.fakeapi import FakeApiServer
    srv = FakeApiServer().start()
    try:
        yield srv, srv.write_kubeconfig(str(tmp_path / "kubeconfig"))
    finally:
        srv.stop()


def _node(name, ip):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}


def test_fake_api_server_converges(api):
    srv, kubeconfig = api
    svc = service("web", "10.96.0.10", ports=((80, "TCP", 30080),), type="NodePort")
    srv.create(svc)
    srv.create(endpoint_slice("web", ["10.1.0.1"]))
    srv.create(_node("node-a", "192.168.1.10"))
    srv.create(_node("node-b", "192.168.1.11"))
    with Running(["--kubeconfig", kubeconfig, "--hostname", "node-a"]) as r:
        eventually(lambda: r.reals(("TCP", "192.168.1.10", 30080)) == {("10.1.0.1", 8080): 1})
        assert ("TCP", "192.168.1.11", 30080) not in r.kernel.virtual  # another node's IP
        sl = srv.get("EndpointSlice", "default", "web-abc")
        sl["endpoints"].append({"addresses": ["10.1.0.2"], "conditions": {"ready": True}})
        srv.update(sl)
        eventually(lambda: r.reals(("TCP", "10.96.0.10", 80)) == {("10.1.0.1", 8080): 1, ("10.1.0.2", 8080): 1})
        srv.delete("Service", "default", "web")
        eventually(lambda: r.kernel.virtual == {})
