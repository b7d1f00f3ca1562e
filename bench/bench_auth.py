"""Basic-auth benchmark: what a request pays for bcrypt, and what the worker cache saves.

Run from the repository root: ``.venv/bin/python -W ignore bench/bench_auth.py``.

One host with basic auth (300 users, all with the same bcrypt hash of the
cost under test) in front of a real HTTP backend, through real nginx and the
Lua router. For each cost: the median latency of a request whose
(user, password) no worker has verified yet (a miss: crypt_r runs), and of
the same requests once verified (a hit in the worker's LRU, lua/auth_basic.lua),
next to the same route without auth. Figures on this machine (2 cores,
shared with other work; a busy run measured cost 10 at 110 ms a miss):

    bcrypt cost 05: miss 1.82 ms, hit 0.37 ms
    bcrypt cost 10: miss 45.04 ms, hit 0.36 ms
    bcrypt cost 12: miss 164.89 ms, hit 0.41 ms
    no auth: 0.40 ms
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from platformd.ingress.auth import Auth  # noqa: E402
from platformd.ingress.model import Backend, Configuration, Location, Server  # noqa: E402
from tests.helpers.backends import HttpBackend  # noqa: E402
from tests.ingress.conftest import DataPlaneHarness  # noqa: E402

# crypt.crypt("secret", "$2b$<cost>$abcdefghijklmnopqrstuu") (python3's crypt, libxcrypt)
HASHES = {
    "05": "$2b$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a",
    "10": "$2b$10$abcdefghijklmnopqrstuuqflPDzB6gcMhKa1rZqKiun2YGL5sa2u",
    "12": "$2b$12$abcdefghijklmnopqrstuuT1Iwu6o8Wx7BoOyIMHfgVJq6JO/IJhW",
}
USERS = 40


def timed(client: httpx.Client, url: str, **kwargs) -> float:
    started = time.perf_counter()
    response = client.get(url, headers={"Host": "app.example"}, **kwargs)
    assert response.status_code == 200, response.status_code
    return time.perf_counter() - started


def main() -> None:
    backend = HttpBackend("app")
    harness = DataPlaneHarness()
    client = httpx.Client()
    backends = (Backend("app", endpoints=(backend.endpoint,)),)
    try:
        for cost, hashed in HASHES.items():
            users = tuple((f"u{i}", hashed) for i in range(USERS))
            location = Location("/", backend="app", auth=Auth("basic", "R", users))
            assert harness.apply(Configuration(servers=(Server("app.example", locations=(location,)),),
                                               backends=backends)).ok
            misses = [timed(client, harness.http_url + "/", auth=(f"u{i}", "secret")) for i in range(USERS)]
            # Three rounds: the first may still miss on the other worker.
            hits = [timed(client, harness.http_url + "/", auth=(f"u{i}", "secret"))
                    for _ in range(3) for i in range(USERS)][USERS:]
            print(f"bcrypt cost {cost}: miss {statistics.median(misses) * 1000:.2f} ms, "
                  f"hit {statistics.median(hits) * 1000:.2f} ms")
        plain = Location("/", backend="app")
        assert harness.apply(Configuration(servers=(Server("app.example", locations=(plain,)),), backends=backends)).ok
        print(f"no auth: {statistics.median(timed(client, harness.http_url + '/') for _ in range(200)) * 1000:.2f} ms")
    finally:
        client.close()
        harness.close()
        backend.stop()


if __name__ == "__main__":
    main()
