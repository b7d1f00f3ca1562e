"""deploy/Dockerfile built for real (deploy/image.py: mmdebstrap + umoci, no Docker), then run.

The image is unpacked with umoci and started as a container runtime would
start it: its own PID and mount namespaces and a network namespace of its
own, chrooted into the image's root, as the image's user with its
entrypoint, environment and working directory from the OCI configuration.
It runs ``platformd --role ingress`` on the demo manifests (examples/demo),
which binds ports 80 and 443 as uid 10001 through nginx's file capability,
and a request through it reaches a backend. Traffic stays on the
namespace's loopback.

Needs root (namespaces, chroot), mmdebstrap and umoci (scripts/setup.sh
installs them) and, for a cold build, Debian's archive and PyPI. The build
cache (.cache/image, see deploy/image.py) makes a rebuild after a code
change take well under a minute.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from platformd.demo import write_manifests
from tests.helpers.waiting import wait_for

from .dockerfile import image
from .test_dockerfile import REPO

pytestmark = pytest.mark.slow

LAYOUT = REPO / ".cache" / "image" / "oci"
HOST = "demo.local"
BACKEND_PORT = 18081
TOKEN = "served-by-the-image"


def _need(condition: bool, why: str) -> None:
    if not condition:
        pytest.skip(why)


@pytest.fixture(scope="module")
def layout() -> Path:
    _need(os.geteuid() == 0, "building and running the image needs root (chroot, namespaces)")
    for tool in ("mmdebstrap", "umoci", "unshare", "ip", "curl"):
        assert shutil.which(tool), f"{tool} is missing: run scripts/setup.sh"
    proc = subprocess.run(["/usr/bin/python3", str(REPO / "deploy" / "image.py"), "--output", str(LAYOUT)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return LAYOUT


@pytest.fixture(scope="module")
def rootfs(layout, tmp_path_factory) -> Path:
    bundle = tmp_path_factory.mktemp("bundle") / "b"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{image.DEFAULT_TAG}", str(bundle)],
                   check=True, capture_output=True, timeout=300)
    yield bundle / "rootfs"
    shutil.rmtree(bundle, ignore_errors=True)


def test_the_image_is_configured_as_the_dockerfile_says(layout, rootfs):
    config = image.image_config(layout)
    final = image.parse((REPO / "deploy" / "Dockerfile").read_text())[-1]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == final.exec_form("ENTRYPOINT")
    assert config["Cmd"] == final.exec_form("CMD")
    assert dict(e.split("=", 1) for e in config["Env"]) == final.env()
    assert config["WorkingDir"] == "/var/lib/platformd"
    assert {"80/tcp", "443/tcp", "10254/tcp"} <= set(config["ExposedPorts"])
    caps = subprocess.run(["getcap", str(rootfs / "usr/sbin/nginx")], capture_output=True, text=True)
    assert "cap_net_bind_service=ep" in caps.stdout, caps.stdout + caps.stderr
    assert (rootfs / "usr/lib/nginx/modules/ndk_http_module.so").exists()
    assert not (rootfs / "etc/nginx/sites-enabled/default").exists()
    assert (rootfs / "run/platform").stat().st_uid == 10001
    assert (rootfs / "opt/platformd/bin/platformd").exists()
    # What the build lends its RUN lines stays out of the image.
    assert not (rootfs / image.HOST_CA.lstrip("/")).exists()


def _netns_exec(netns: str, *argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True,
                          timeout=30, **kwargs)


@pytest.fixture
def netns():
    name = f"platimg-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name])


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_the_image_serves_the_demo_as_its_unprivileged_user(layout, rootfs, netns, tmp_path):
    config = image.image_config(layout)
    manifests = rootfs / "srv" / "demo"
    write_manifests(manifests, {"web": BACKEND_PORT, "web-canary": BACKEND_PORT, "api": BACKEND_PORT})
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(TOKEN + "\n")
    backend = _start(["ip", "netns", "exec", netns, sys.executable, "-m", "http.server", str(BACKEND_PORT),
                      "--bind", "127.0.0.1", "--directory", str(site)], tmp_path / "backend.log")
    # A container runtime's start, by hand: new PID and mount namespaces in the
    # network namespace, /proc and /dev, then the image's user, environment,
    # working directory and entrypoint (plus the chart's --state-dir).
    args = [*config["Entrypoint"], "--role", "ingress", "--source", "/srv/demo", "--state-dir", "/run/platform"]
    inside = ('set -e; root="$1"; shift\n'
              'mount -t proc proc "$root/proc"\n'
              'mount --rbind /dev "$root/dev"\n'
              'exec chroot --userspec=10001:10001 --groups=10001 "$root" "$@"\n')
    container = _start(
        ["ip", "netns", "exec", netns, "unshare", "--pid", "--mount", "--fork", "--propagation", "private",
         "sh", "-c", inside, "sh", str(rootfs), "/usr/bin/env", "-i", *config["Env"], "HOME=/var/lib/platformd",
         "sh", "-c", f'cd {config["WorkingDir"]} && exec "$@"', "sh", *args],
        tmp_path / "container.log")
    try:
        def served() -> str:
            """a request through the image's nginx on port 80 reaches the backend"""
            assert container.poll() is None, "the container exited"
            out = _netns_exec(netns, "curl", "-s", "-m", "3", "-H", f"Host: {HOST}", "http://127.0.0.1/")
            return out.stdout if TOKEN in out.stdout else ""

        try:
            wait_for(served, timeout=90, interval=0.5, ignore=(subprocess.TimeoutExpired,))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{(tmp_path / 'container.log').read_text()[-5000:]}") from None
        https = _netns_exec(netns, "curl", "-sk", "-m", "5", "--resolve", f"{HOST}:443:127.0.0.1",
                            f"https://{HOST}/")
        assert TOKEN in https.stdout, https.stderr
        # Who listens on 80: nginx, as the image's user, not root.
        listeners = _netns_exec(netns, "ss", "-ltnpH", "sport = :80").stdout
        pids = {int(p) for p in re.findall(r"pid=(\d+)", listeners)}
        assert pids, listeners
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
            assert uids == ["10001"] * 4, (pid, uids)
            assert os.readlink(f"/proc/{pid}/exe").endswith("/usr/sbin/nginx")
        # The combined health server answers inside the container too, and
        # becomes healthy once every program has been up for its startsecs.
        def status() -> dict:
            return json.loads(_netns_exec(netns, "curl", "-s", "-m", "5", "http://127.0.0.1:10254/status").stdout)

        wait_for(lambda: status()["healthy"], timeout=30, interval=0.5, ignore=(ValueError,),
                 message="/status healthy")
    finally:
        _stop(container)
        _stop(backend)
