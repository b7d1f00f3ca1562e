"""Client for the Lua configuration endpoint on nginx's unix socket.

One verb: ``push(section, data)`` posts a section and returns once Lua reports
the checksum we computed (``GET /configuration/<section>``), retrying with
backoff while nginx is unreachable, answering 5xx, or still shows an older
checksum. A 4xx answer means Lua refused the payload: retrying cannot help, so
``LuaRejected`` is raised at once.

Backoff numbers: first retry after 5 ms (an endpoint change should land in
milliseconds, and the usual transient cause, a reload swapping workers, is
over that fast), doubling to at most 500 ms (nginx restarting takes about
that long), giving up after ``deadline`` seconds (10 s default: longer than a
cold nginx start-up, short enough for the caller to report and retry later).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from platformd.common.backoff import Backoff
from platformd.common.clock import REAL_CLOCK, Clock
from platformd.ingress.render import canonical_json, checksum

__all__ = ["LuaClient", "LuaError", "LuaRejected", "LuaUnavailable"]


class LuaError(Exception):
    """Base class for failures talking to the Lua configuration endpoint."""


class LuaRejected(LuaError):
    """Lua answered 4xx: the payload is invalid or too large."""

    def __init__(self, section: str, status: int, body: str) -> None:
        super().__init__(f"lua refused section {section!r}: HTTP {status}: {body[:200]}")
        self.section = section
        self.status = status


class LuaUnavailable(LuaError):
    """No confirmation within the deadline (nginx down, 5xx, wrong checksum)."""


class LuaClient:
    def __init__(
        self,
        socket_path: Path,
        *,
        clock: Clock = REAL_CLOCK,
        deadline: float = 10.0,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.clock = clock
        self.deadline = deadline
        self._http = httpx.Client(
            # ``transport`` replaces the unix socket (e.g. httpx.MockTransport).
            transport=transport or httpx.HTTPTransport(uds=str(socket_path)),
            base_url="http://nginx-config",
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def push(self, section: str, data: Any, expected: str | None = None) -> str:
        """Post ``data`` as ``section``; return the checksum once Lua confirms it."""
        expected = expected or checksum(data)
        body = b'{"checksum":"' + expected.encode() + b'","data":' + canonical_json(data) + b"}"
        backoff = Backoff(initial=0.005, cap=0.5)
        give_up = self.clock.monotonic() + self.deadline
        last_problem = "no attempt made"
        while True:
            try:
                response = self._http.post(
                    f"/configuration/{section}", content=body, headers={"Content-Type": "application/json"}
                )
                if 400 <= response.status_code < 500:
                    raise LuaRejected(section, response.status_code, response.text)
                if response.status_code >= 300:
                    last_problem = f"POST answered HTTP {response.status_code}"
                elif self.checksum(section) == expected:
                    return expected
                else:
                    last_problem = "GET shows a different checksum"
            except httpx.TransportError as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            delay = backoff.next_delay()
            if self.clock.monotonic() + delay > give_up:
                raise LuaUnavailable(f"section {section!r} not confirmed within {self.deadline}s: {last_problem}")
            self.clock.sleep(delay)

    def checksum(self, section: str) -> str | None:
        """The checksum Lua currently holds for ``section`` (None if unset).

        Reads the summary (``GET /configuration``), which carries checksums
        and versions only, so confirming a large section does not make Lua
        re-encode its whole payload.
        """
        response = self._http.get("/configuration")
        if response.status_code != 200:
            return None
        try:
            return response.json()[section].get("checksum")
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def get(self, section: str | None = None) -> Any:
        """The raw GET answer (for diagnostics and tests)."""
        response = self._http.get("/configuration" + (f"/{section}" if section else ""))
        response.raise_for_status()
        return response.json()

    def healthy(self) -> bool:
        try:
            return self._http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False
