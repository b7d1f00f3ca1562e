"""Running the controller: health, readiness, status, metrics, Events, nginx
restarts, supervisor mode (``--external-nginx`` + ``platformd nginx``), start errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from platformd.ingress.nginx import NginxFiles, NginxProcess
from tests.helpers.backends import free_port
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
STATUS_FIELDS = {"informers_synced", "last_sync_time", "config_checksum", "reload_count", "last_reload_result",
                 "ingresses", "backends", "endpoints"}
METRICS = ["nginx_ingress_controller_config_last_reload_successful 1.0",
           "nginx_ingress_controller_config_last_reload_successful_timestamp_seconds",
           "nginx_ingress_controller_config_hash", "nginx_ingress_controller_success",
           "nginx_ingress_controller_sync_duration_seconds_count", "nginx_ingress_controller_ingresses 1.0",
           "nginx_ingress_controller_backends 1.0", "nginx_ingress_controller_endpoints 2.0"]


def _seed(fake_api, backends) -> None:
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [b.ip for b in backends.backends]))
    fake_api.create(o.ingress("web", "web.example", [("/", "web", 80)]))


def test_internal_endpoints_and_events(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["b0", "b1"])
    _seed(fake_api, backends)
    running = ingress_controller()
    running.wait_ready()
    assert running.internal("/healthz").status_code == 200
    status = running.status()
    assert STATUS_FIELDS <= set(status)
    assert status["last_reload_result"] == "ok" and status["informers_synced"] is True
    assert (status["ingresses"], status["backends"], status["endpoints"]) == (1, 1, 2)
    assert len(status["config_checksum"]) == 64 and status["last_sync_time"] > time.time() - 60
    metrics = running.internal("/metrics").text
    for name in METRICS:
        assert name in metrics, name
    assert {running.get("/", host="web.example").text for _ in range(6)} == {"b0", "b1"}
    wait_for(lambda: any(e.get("reason") == "Sync" and e["involvedObject"]["name"] == "web"
                         for e in fake_api.list_objects("events", "default")), 15, message="Sync event")


def test_nginx_crash_is_healed(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["b0"])
    _seed(fake_api, backends)
    running = ingress_controller()
    running.wait_ready()
    # A crash from outside, as the kernel's OOM killer would do it: SIGKILL to the master.
    nginx = NginxProcess(NginxFiles(running.state_dir))
    crashed = nginx.master_pid()
    os.kill(crashed, signal.SIGKILL)
    # The controller starts a new master (the orphaned workers are told to quit).
    # Synchronised on that event: the unhealthy window between the kill and
    # the new master can be shorter than a poll under load.
    wait_for(lambda: nginx.master_pid() not in (None, crashed), 20, message="a new nginx master")
    wait_for(lambda: running.internal("/healthz").status_code == 200, 20, message="healthy again")
    running.wait_served("web.example", "/", "b0", timeout=20)


def test_external_nginx_under_platformd_nginx(fake_api, ingress_controller, netns_backends, tmp_path):
    """Supervisor mode: `platformd nginx` owns nginx, the controller only writes,
    signals and pushes; a restarted nginx gets the dynamic state again."""
    backends = netns_backends(["b0"])
    _seed(fake_api, backends)
    running = ingress_controller("--external-nginx")
    flags = ["--state-dir", str(running.state_dir), "--http-port", str(running.http_port),
             "--https-port", str(running.https_port)]

    def launch() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "platformd.cli", "nginx", *flags], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    nginx = launch()
    try:
        running.wait_ready(30)
        running.wait_served("web.example", "/", "b0")
        assert "daemon" not in (running.state_dir / "nginx.conf").read_text()
        os.killpg(nginx.pid, signal.SIGKILL)  # nginx and logpipe die together, as in a crash
        nginx.wait(5)
        time.sleep(0.5)
        nginx = launch()  # what supervisord would do; keeps the nginx.conf the controller wrote
        running.wait_served("web.example", "/", "b0", timeout=20)
    finally:
        if nginx.poll() is None:
            os.killpg(nginx.pid, signal.SIGQUIT)
            nginx.wait(10)


def test_platformd_nginx_bootstrap_config(tmp_path):
    state = Path(f"/tmp/pdn-{os.getpid()}")
    from platformd.ingress import launch
    from platformd.ingress.main import build_parser
    args = build_parser().parse_args(["--state-dir", str(state), "--http-port", str(free_port()),
                                      "--https-port", str(free_port())])
    try:
        argv = launch.bootstrap(args)
        conf = (state / "nginx.conf").read_text()
        assert "daemon" not in conf and f"listen {args.http_port}" in conf
        assert argv[1:4] == ["-m", "platformd.logpipe", "--name"] and argv[-2:] == ["-g", "daemon off;"]
        # An existing file is kept (nginx restarted by supervisord serves the last applied config).
        (state / "nginx.conf").write_text(conf + "# marker\n")
        launch.bootstrap(args)
        assert (state / "nginx.conf").read_text().endswith("# marker\n")
    finally:
        subprocess.run(["rm", "-rf", str(state)])


def _run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platformd.cli", "ingress", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_start_errors_are_one_line(tmp_path):
    missing = _run_cli("--kubeconfig", str(tmp_path / "nope"))
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    unreachable = _run_cli("--kubeconfig", str(kubeconfig))
    no_dir = _run_cli("--source", str(tmp_path / "missing"))
    # A missing kubeconfig is a configuration error (EXIT_CONFIG: the supervisor stops at once).
    for result, status in ((missing, 78), (unreachable, 1), (no_dir, 1)):
        assert result.returncode == status, result
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith("ingress: ")
    assert "127.0.0.1" in unreachable.stderr
