"""Instructions nginx executes per request, counted by callgrind.

Requests per second on a shared two-core machine move with whatever else
runs; the number of instructions nginx executes per request does not (runs
agree to a few in ten thousand), so this is the figure to compare while
changing the hot path. It counts user-space instructions only: the kernel's
share of a request (sockets, epoll) is the same for every path and shows up
in the wall-clock figures instead.

Each path is measured in its own nginx, started under
``valgrind --tool=callgrind`` as one process (``master_process off``), so the
LuaJIT traces of one path cannot shape another's. After the dynamic state is
pushed and ``warmup`` requests have let LuaJIT compile the hot path, the
counters are zeroed, ``requests`` requests are sent on one keep-alive
connection, and the counters dumped: total instructions / requests.
``settle`` seconds between the warm-up and the count let the collection
that follows a push end (see ``measure``).
With ``BENCH_CALLGRIND_DIR`` set, each dump is kept there as
``<path name>.callgrind`` for ``callgrind_annotate``.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

NGINX = "/usr/sbin/nginx"


@dataclass(frozen=True)
class Target:
    """One path through the configuration: where to send requests, and the answer to expect."""

    name: str
    port: int
    host: str
    body: bytes


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def single_process(conf: str) -> str:
    """``conf`` run as one process in the foreground (what callgrind can follow)."""
    return "master_process off;\ndaemon off;\n" + conf


def _requests(target: Target, count: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=60)
    try:
        for _ in range(count):
            conn.request("GET", "/", headers={"Host": target.host})
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or body != target.body:
                raise RuntimeError(f"{target.name}: HTTP {response.status} {body[:80]!r}")
    finally:
        conn.close()


def _total(dump: Path) -> int:
    match = re.search(r"^totals:\s+(\d+)", dump.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no totals in {dump}")
    return int(match.group(1))


def measure(
    conf: str,
    state_dir: Path,
    target: Target,
    ready: Callable[[], bool],
    push: Callable[[], None],
    *,
    requests: int = 2000,
    warmup: int = 2000,
    settle: float = 0.0,
) -> float:
    """Instructions per request of ``target`` in a fresh single-process nginx on ``conf``.

    ``ready()`` says when nginx answers (its configuration socket), ``push()``
    loads the Lua state. No other nginx may be listening on ``conf``'s ports.
    """
    out_dir = Path(tempfile.mkdtemp(prefix="pd-cg-"))
    conf_path = state_dir / "callgrind.conf"
    conf_path.write_text(single_process(conf))
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--smc-check=all-non-file",  # LuaJIT writes code at run time
         f"--callgrind-out-file={out_dir}/cg.%p", NGINX, "-p", str(state_dir), "-c", str(conf_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx under callgrind did not start; see {state_dir}/logs")
            time.sleep(0.2)
        push()
        _requests(target, warmup)
        # After a push each worker's timer collects the replaced state's
        # garbage (lua/platform.lua, a few seconds of steps at 10,000
        # Ingresses, slower under callgrind): work of the change, not of a
        # request, so it is left to finish before counting.
        time.sleep(settle)
        control = ["callgrind_control"]
        subprocess.run([*control, "--zero", str(proc.pid)], check=True, capture_output=True)
        _requests(target, requests)
        before = set(out_dir.iterdir())
        subprocess.run([*control, "--dump", str(proc.pid)], check=True, capture_output=True)
        (dump,) = set(out_dir.iterdir()) - before
        keep = os.environ.get("BENCH_CALLGRIND_DIR")
        if keep:  # for callgrind_annotate: where the instructions go, per function
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(dump, Path(keep) / f"{target.name.replace(' ', '_')}.callgrind")
        return _total(dump) / requests
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(out_dir, ignore_errors=True)
