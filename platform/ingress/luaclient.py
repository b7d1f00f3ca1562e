"""Client for the Lua configuration endpoint on nginx's unix socket.

One verb: ``push(section, data)`` posts a section and returns once Lua reports
the checksum we computed (``push_section`` posts a section already encoded by
``render.dynamic_sections``; ``push_delta`` posts a backends delta, which Lua
refuses with 409, raised as ``LuaConflict``, unless its base is the checksum
in force: the caller then posts the whole section). Lua's 201 answer carries the checksum and version
now in force, so the usual push is one round trip on one persistent
connection; only after a failed attempt (transport error, 5xx, another
checksum in force) does a retry first read the summary (``GET
/configuration``), because the failed POST may still have landed. A 4xx
answer means Lua refused the payload, and so does 507 (valid, but larger than
the shared dict): retrying cannot help, so ``LuaRejected`` (``LuaTooLarge``
for 507) is raised at once.

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
from platformd.ingress.render import BackendsDelta, DynamicSection, canonical_json, section_checksum

__all__ = ["LuaClient", "LuaConflict", "LuaError", "LuaRejected", "LuaTooLarge", "LuaUnavailable"]


class LuaError(Exception):
    """Base class for failures talking to the Lua configuration endpoint."""


class LuaRejected(LuaError):
    """Lua refused the payload (4xx: invalid or over the body limit; 507: see LuaTooLarge)."""

    def __init__(self, section: str, status: int, body: str) -> None:
        super().__init__(f"lua refused section {section!r}: HTTP {status}: {body[:200]}")
        self.section = section
        self.status = status


class LuaTooLarge(LuaRejected):
    """Lua answered 507: the payload is valid but does not fit its shared dict.

    Nothing changed in Lua. Only a smaller payload (or a larger
    ``lua_shared_dict`` in the template) helps, so this is never retried.
    """


class LuaConflict(LuaRejected):
    """Lua answered 409 to a delta: its base is not in force (or the chain is too long).

    Nothing changed in Lua; posting the whole section resolves it.
    """


class LuaUnavailable(LuaError):
    """No confirmation within the deadline (nginx down, 5xx, wrong checksum)."""


_JSON = {"Content-Type": "application/json"}


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
        expected = expected or section_checksum(section, data)
        return self._send(section, _full_body(expected, canonical_json(data)), expected)

    def push_section(self, section: DynamicSection) -> str:
        """Post the whole of an encoded section; return its checksum once confirmed."""
        return self._send(section.name, _full_body(section.checksum, section.body), section.checksum)

    def check(self, section: DynamicSection) -> str | None:
        """Whether Lua would accept ``section`` (nothing is stored): None, or its refusal."""
        response = self._http.post(f"/configuration/{section.name}", params={"check": "1"},
                                   **_content(_full_body(section.checksum, section.body)))
        if response.status_code == 200:
            return None
        if response.status_code in (400, 413):
            try:
                return str(response.json().get("error", response.text))
            except ValueError:
                return response.text[:500]
        raise LuaUnavailable(f"check of section {section.name!r} answered {response.status_code}")

    def push_delta(self, delta: BackendsDelta) -> str:
        """Post a backends delta; ``LuaConflict`` if its base is not in force."""
        return self._send("backends", (delta.body(),), delta.checksum)

    def _send(self, section: str, body: tuple[bytes, ...], expected: str) -> str:
        backoff: Backoff | None = None
        give_up = self.clock.monotonic() + self.deadline
        last_problem = "no attempt made"
        while True:
            try:
                # After a failed attempt the POST may have landed anyway.
                if backoff is not None and self.checksum(section) == expected:
                    return expected
                last_problem = self._post(section, body, expected)
                if last_problem is None:
                    return expected
            except httpx.TransportError as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            backoff = backoff or Backoff(initial=0.005, cap=0.5)
            delay = backoff.next_delay()
            if self.clock.monotonic() + delay > give_up:
                raise LuaUnavailable(f"section {section!r} not confirmed within {self.deadline}s: {last_problem}")
            self.clock.sleep(delay)

    def _post(self, section: str, body: tuple[bytes, ...], expected: str) -> str | None:
        """One POST; None when its answer confirms ``expected``, else the problem."""
        response = self._http.post(f"/configuration/{section}", **_content(body))
        status = response.status_code
        if status == 409:
            raise LuaConflict(section, status, response.text)
        if status == 507:
            raise LuaTooLarge(section, status, response.text)
        if 400 <= status < 500:
            raise LuaRejected(section, status, response.text)
        if status >= 300:
            return f"POST answered HTTP {status}"
        try:
            in_force = response.json().get("checksum")
        except (ValueError, AttributeError):
            in_force = None
        if in_force == expected:
            return None
        return f"POST answered checksum {in_force!r} in force"

    def checksum(self, section: str) -> str | None:
        """The checksum Lua currently holds for ``section`` (None if unset)."""
        return self.checksums().get(section)

    def checksums(self) -> dict[str, str | None]:
        """Every section's checksum in force, from one read of the summary
        (``GET /configuration``: checksums and versions only, so confirming a
        large section does not make Lua re-encode its payload); {} when the
        summary cannot be read.
        """
        response = self._http.get("/configuration")
        if response.status_code != 200:
            return {}
        try:
            return {name: entry.get("checksum") for name, entry in response.json().items()}
        except (ValueError, TypeError, AttributeError):
            return {}

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


def _full_body(expected: str, payload: bytes) -> tuple[bytes, ...]:
    """The POST body as its pieces: sent one after the other (``_content``),
    never joined into one copy of the payload."""
    return (b'{"checksum":"' + expected.encode() + b'","data":', payload, b"}")


def _content(pieces: tuple[bytes, ...]) -> dict[str, Any]:
    """httpx arguments that stream ``pieces`` with a Content-Length.

    Why not ``content=<bytes>``: each POST then built a joined copy of the
    section (~180 KB a routes shard at 10,000 routes, 3 MB the backends), and
    about one such body per apply stayed allocated for good (tracemalloc: +1
    block per apply at ``_full_body``; ``sys.getrefcount`` showed a reference
    no gc-visible object holds, so ``gc`` could not free it); the controller's
    RSS grew ~20-60 KB per apply, with or without ``malloc_trim`` or
    ``MALLOC_ARENA_MAX=2``. An exhausted list iterator lets go of its pieces,
    so whatever keeps the request keeps no body. A fresh iterator per attempt:
    ``_send`` may post again. The Content-Length keeps httpx from chunking."""
    length = sum(map(len, pieces))
    return {"content": iter(list(pieces)),
            "headers": {**_JSON, "Content-Length": str(length)}}
